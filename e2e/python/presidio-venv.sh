#!/usr/bin/env bash
# A cached Python venv with the pinned Presidio analyzer of presidio-requirements.txt, from PyPI,
# and a blank spaCy English pipeline saved beside it (spaCy's trained pipelines are not on PyPI;
# the analyzer's pattern recognizers, cards, IBANs, emails, phones, IPs, SSNs, need none). Prints
# the venv's python as the LAST line of stdout; warm runs only compare the stamp and exit.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/platform-ai-optimizer"
VENV="${CACHE_ROOT}/py-presidio"
want="$(sha256sum "${HERE}/presidio-requirements.txt" | cut -c1-16) $(python3 --version 2>&1)"
if [[ -f "${VENV}/.stamp" && "$(<"${VENV}/.stamp")" == "${want}" ]]; then echo "${VENV}/bin/python"; exit 0; fi
mkdir -p "${CACHE_ROOT}"
exec 9>"${CACHE_ROOT}/.py-presidio.lock"
flock 9
if [[ -f "${VENV}/.stamp" && "$(<"${VENV}/.stamp")" == "${want}" ]]; then echo "${VENV}/bin/python"; exit 0; fi
start=${SECONDS}
rm -rf "${VENV}"
python3 -m venv "${VENV}" >&2
"${VENV}/bin/pip" install -q --disable-pip-version-check -r "${HERE}/presidio-requirements.txt" >&2
"${VENV}/bin/python" -c 'import spacy, sys; spacy.blank("en").to_disk(sys.argv[1])' "${VENV}/blank_en" >&2
printf '%s\n' "${want}" >"${VENV}/.stamp"
echo "[python/presidio-venv.sh] Presidio analyzer installed in $((SECONDS - start))s" >&2
echo "${VENV}/bin/python"
