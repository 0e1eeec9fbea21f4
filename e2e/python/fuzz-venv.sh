#!/usr/bin/env bash
# A cached Python venv with the pinned fuzzer of fuzz-requirements.txt (schemathesis), from PyPI.
# Prints the venv's `st` as the LAST line of stdout; warm runs only compare the stamp (the
# requirements file's hash) and exit.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/platform-ai-optimizer"
VENV="${CACHE_ROOT}/py-fuzz"
want="$(sha256sum "${HERE}/fuzz-requirements.txt" | cut -c1-16) $(python3 --version 2>&1)"
if [[ -f "${VENV}/.stamp" && "$(<"${VENV}/.stamp")" == "${want}" ]]; then echo "${VENV}/bin/st"; exit 0; fi
mkdir -p "${CACHE_ROOT}"
exec 9>"${CACHE_ROOT}/.py-fuzz.lock"
flock 9
if [[ -f "${VENV}/.stamp" && "$(<"${VENV}/.stamp")" == "${want}" ]]; then echo "${VENV}/bin/st"; exit 0; fi
start=${SECONDS}
rm -rf "${VENV}"
python3 -m venv "${VENV}" >&2
"${VENV}/bin/pip" install -q --disable-pip-version-check -r "${HERE}/fuzz-requirements.txt" >&2
printf '%s\n' "${want}" >"${VENV}/.stamp"
echo "[python/fuzz-venv.sh] schemathesis installed in $((SECONDS - start))s" >&2
echo "${VENV}/bin/st"
