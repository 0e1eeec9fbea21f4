#!/usr/bin/env bash
# The images the e2e real node (e2e/cluster/real-node.ts) runs, as docker archives its
# containerd imports (no registry is reachable from here):
#   - the project's image (build.sh);
#   - the model server: the project's registry-only Ollama build (e2e/ollama/build.sh) in the
#     project's base image (base.sh), run as Ollama's own image runs it (ENTRYPOINT ollama,
#     CMD serve, port 11434). It has bash, flock and coreutils, which the operator's pull script
#     and model probe use;
#   - the sandbox ("pause") image: the static e2e/cluster/pause program FROM scratch;
#   - the vLLM model server: the CPU vLLM of e2e/vllm/build.sh in the base image (vllm-image.sh).
#
# Output: one line per image, `<reference> <archive>`, the last four lines of stdout, in this
# order: the project's, Ollama's, the pause image, vLLM's.
# Archives are cached under ~/.cache/platform-ai-optimizer/node-images/, named for the image id,
# so a warm run saves nothing.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${SCRIPT_DIR}/../.." && pwd)"
export CONTAINERS_CONF="${SCRIPT_DIR}/containers.conf"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/platform-ai-optimizer/node-images"
mkdir -p "${CACHE}"

log() { printf '[image/node-images.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# shellcheck source=SCRIPTDIR/../ollama/versions.env
source "${ROOT}/e2e/ollama/versions.env"
: "${OLLAMA_VERSION:?}"

PROJECT_IMAGE="$(bash "${SCRIPT_DIR}/build.sh" | tail -n1)"
BASE_TAG="$(bash "${SCRIPT_DIR}/base.sh" | tail -n1)"
OLLAMA_DIR="$(bash "${ROOT}/e2e/ollama/build.sh" | tail -n1)"
K8S_BIN="$(bash "${ROOT}/e2e/cluster/build.sh" | tail -n1)"
VLLM_IMAGE="$(bash "${SCRIPT_DIR}/vllm-image.sh" | tail -n1)"

OLLAMA_IMAGE="localhost/pao-ollama:${OLLAMA_VERSION}"
PAUSE_IMAGE="localhost/pao-pause:e2e"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/pao-node-images.XXXXXX")"
trap 'rm -rf "${WORK}"' EXIT

mkdir -p "${WORK}/ollama" "${WORK}/pause"
cp "${OLLAMA_DIR}/bin/ollama" "${WORK}/ollama/ollama"
cat >"${WORK}/ollama/Containerfile" <<CF
FROM ${BASE_TAG}
COPY ollama /usr/bin/ollama
ENV OLLAMA_HOST=0.0.0.0:11434
EXPOSE 11434
ENTRYPOINT ["/usr/bin/ollama"]
CMD ["serve"]
CF
log "podman build ${OLLAMA_IMAGE}"
podman build -q -t "${OLLAMA_IMAGE}" -f "${WORK}/ollama/Containerfile" "${WORK}/ollama" >&2

cp "${K8S_BIN}/pao-pause" "${WORK}/pause/pause"
printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"${WORK}/pause/Containerfile"
log "podman build ${PAUSE_IMAGE}"
podman build -q -t "${PAUSE_IMAGE}" -f "${WORK}/pause/Containerfile" "${WORK}/pause" >&2

for ref in "${PROJECT_IMAGE}" "${OLLAMA_IMAGE}" "${PAUSE_IMAGE}" "${VLLM_IMAGE}"; do
  id="$(podman image inspect --format '{{.Id}}' "${ref}" | cut -c1-16)"
  archive="${CACHE}/$(tr '/:' '__' <<<"${ref}")-${id}.tar"
  if [[ ! -s "${archive}" ]]; then
    log "podman save ${ref}"
    # Older archives of this image are of no use once it changed.
    rm -f "${CACHE}/$(tr '/:' '__' <<<"${ref}")"-*.tar
    save_start=${SECONDS}
    podman save --format docker-archive -o "${archive}.part" "${ref}" >&2
    mv "${archive}.part" "${archive}"
    log "saved ${ref} in $((SECONDS - save_start))s: $(du -h --apparent-size "${archive}" | cut -f1)"
  fi
  echo "${ref} ${archive}"
done
