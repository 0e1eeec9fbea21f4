#!/usr/bin/env bash
# Build the project's Dockerfile with podman, FROM the base image e2e/image/base.sh assembles from
# registries (Docker Hub is not reachable here), passed as the NODE_IMAGE build argument, so the
# Dockerfile's public default (node:24-trixie-slim) stays as it is.
#
# Output: the LAST line of stdout is the image reference (localhost/platform-ai-optimizer:e2e).
# podman keeps the build's layers, so a warm run rebuilds only what changed (the npm ci layer
# survives while package-lock.json does). The build stage is tagged too (<image>-build), so that
# once a build has replaced both, the images of the one before can be removed with the layers
# only they used: each code change used to leave them untagged (the build stage's 1.4 GB and
# the last image's 0.5 GB, as podman lists them), a disk filled over weeks of runs.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${SCRIPT_DIR}/../.." && pwd)"
export CONTAINERS_CONF="${SCRIPT_DIR}/containers.conf"
IMAGE="${PAO_IMAGE:-localhost/platform-ai-optimizer:e2e}"

log() { printf '[image/build.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

BASE_TAG="$(bash "${SCRIPT_DIR}/base.sh" | tail -n1)"

BUILD_IMAGE="${IMAGE}-build"
idOf() { podman image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }
before=("$(idOf "${IMAGE}")" "$(idOf "${BUILD_IMAGE}")")

log "podman build ${IMAGE} (FROM ${BASE_TAG})"
# Host network: the build's apt-get and npm ci reach the registries as this machine does.
build() { podman build --network host --build-arg "NODE_IMAGE=${BASE_TAG}" -f "${ROOT}/Dockerfile" "$@" "${ROOT}" >&2; }
build --target build -t "${BUILD_IMAGE}"
build -t "${IMAGE}"
log "$(podman image inspect --format 'size {{.Size}} bytes' "${IMAGE}")"

# What the last build left that this one replaced: once nothing names it (an image this build
# kept has its tag still, one tagged elsewhere too). Removing an image removes its untagged
# parents no other image uses, never a layer the new images share. One still in use (a
# container left from a run) stays.
for id in "${before[@]}"; do
  [[ -n "${id}" && "$(podman image inspect --format '{{len .RepoTags}}' "${id}" 2>/dev/null)" == 0 ]] || continue
  podman rmi "${id}" >/dev/null 2>&1 && log "removed the last build's image ${id:0:12}" || true
done
echo "${IMAGE}"
