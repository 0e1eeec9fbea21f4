#!/usr/bin/env bash
# Build the project's Dockerfile with podman, FROM the base image e2e/image/base.sh assembles from
# registries (Docker Hub is not reachable here), passed as the NODE_IMAGE build argument, so the
# Dockerfile's public default (node:24-trixie-slim) stays as it is.
#
# Output: the LAST line of stdout is the image reference (localhost/platform-ai-optimizer:e2e).
# podman keeps the build's layers, so a warm run rebuilds only what changed (the npm ci layer
# survives while package-lock.json does).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${SCRIPT_DIR}/../.." && pwd)"
export CONTAINERS_CONF="${SCRIPT_DIR}/containers.conf"
IMAGE="${PAO_IMAGE:-localhost/platform-ai-optimizer:e2e}"

log() { printf '[image/build.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

BASE_TAG="$(bash "${SCRIPT_DIR}/base.sh" | tail -n1)"

log "podman build ${IMAGE} (FROM ${BASE_TAG})"
# Host network: the build's apt-get and npm ci reach the registries as this machine does.
podman build --network host --build-arg "NODE_IMAGE=${BASE_TAG}" -t "${IMAGE}" -f "${ROOT}/Dockerfile" "${ROOT}" >&2
log "$(podman image inspect --format 'size {{.Size}} bytes' "${IMAGE}")"
echo "${IMAGE}"
