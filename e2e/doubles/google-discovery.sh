#!/usr/bin/env bash
# Google's published API discovery documents for what the Vertex AI double plays (aiplatform v1
# and v1beta1, sts v1, iamcredentials v1), from the google-api-python-client wheel on PyPI, which
# ships them. Cached under ~/.cache/platform-ai-optimizer/google-discovery/<version>/; prints
# that directory as the LAST line of stdout.
set -euo pipefail
VERSION=2.202.0
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/platform-ai-optimizer"
OUT="${CACHE_ROOT}/google-discovery/${VERSION}"
DOCS=(aiplatform.v1.json aiplatform.v1beta1.json sts.v1.json iamcredentials.v1.json)
if [[ -f "${OUT}/.done" ]]; then echo "${OUT}"; exit 0; fi
mkdir -p "${OUT}"
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
# pip from a throwaway venv when the system python has none (Debian's python3-venv brings it).
pip=(python3 -m pip)
if ! python3 -m pip --version >/dev/null 2>&1; then
  python3 -m venv "${tmp}/venv" >&2
  pip=("${tmp}/venv/bin/python" -m pip)
fi
"${pip[@]}" download -q --disable-pip-version-check --no-deps -d "${tmp}" "google-api-python-client==${VERSION}" >&2
python3 - "${tmp}" "${OUT}" "${DOCS[@]}" <<'PY'
import glob, sys, zipfile
tmp, out, docs = sys.argv[1], sys.argv[2], sys.argv[3:]
wheel = zipfile.ZipFile(glob.glob(f"{tmp}/google_api_python_client-*.whl")[0])
for doc in docs:
    with open(f"{out}/{doc}", "wb") as f:
        f.write(wheel.read(f"googleapiclient/discovery_cache/documents/{doc}"))
PY
touch "${OUT}/.done"
echo "${OUT}"
