#!/usr/bin/env bash
# What the e2e tier and the benchmarks need on this machine, set up in one idempotent step:
#   bash e2e/setup.sh e2e     `npm run test:e2e` runs it first (pretest:e2e)
#   bash e2e/setup.sh bench   `npm run bench` runs it first (prebench)
#
# 1. Debian packages. As root, the missing ones are installed (one apt-get update, one install).
#    Not as root, nothing is installed: e2e stops at once with one line naming each missing
#    package; bench says which are missing and goes on (the targets that need them skip, and say so).
# 2. e2e only: the real components built from package registries into
#    ~/.cache/platform-ai-optimizer/ (each build script compares its stamp and exits when warm):
#    the control plane and the real node's binaries, Ollama and its models, vLLM (PyPI's CPU build)
#    and its model, the Python clients, the spec fuzzer (schemathesis),
#    botocore's service models, the image and the real node's images, the OpenTelemetry Collector
#    and the chart linters. The suites would build each at
#    first use; building here first makes a cold run's time readable, one line per component.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODE="${1:-}"
[[ "${MODE}" == e2e || "${MODE}" == bench ]] || { echo "usage: e2e/setup.sh e2e|bench" >&2; exit 2; }

# Each need: "<how to check> <Debian package> <who needs it>". The check is a command on PATH, an
# absolute path or glob (a file that must exist), or "py:<module>" (importable by python3); who is
# e2e, or e2e,bench.
NEEDS=(
  "unzip unzip e2e,bench"                         # kubectl and helm from their npm package (cluster/tools.ts)
  "flock util-linux e2e,bench"                    # the cached builds serialize on a lock
  "curl curl e2e,bench"                           # ollama/build.sh waits for its server with it
  "py:ensurepip python3-venv e2e,bench"           # the Python clients' venv, checkov's, LiteLLM's
  "/usr/bin/chromium chromium e2e"                # the Usage and Analytics pages in a real browser
  "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf fonts-dejavu-core e2e,bench"  # the bench charts' text
  "/usr/lib/postgresql/*/bin/initdb postgresql e2e,bench"  # usage and budgets in PostgreSQL; ours-pg
  "redis-server redis-server e2e,bench"           # the shared rate limit; ours-pg
  "podman podman e2e"                             # the image: built and run as the chart runs it
  "runc runc e2e"
  "debootstrap debootstrap e2e"                   # the image's base rootfs (Debian trixie)
  "newuidmap uidmap e2e"
  "fuse-overlayfs fuse-overlayfs e2e"
  "/usr/include/nlohmann/json.hpp nlohmann-json3-dev e2e,bench"  # headers Ollama's module zip leaves out
  "/usr/include/stb/stb_image.h libstb-dev e2e,bench"            # (cold-start's Ollama too)
  # The real node (cluster/real-node.ts): its runtime, CNI plugins and firewall tools.
  "containerd containerd e2e"
  "/usr/lib/cni/bridge containernetworking-plugins e2e"
  "iptables iptables e2e"
  "ipset ipset e2e"
  "conntrack conntrack e2e"
)

have() {
  case "$1" in
    py:*) python3 -c "import ${1#py:}" 2>/dev/null ;;
    /*) compgen -G "$1" >/dev/null ;;
    *) command -v "$1" >/dev/null ;;
  esac
}

missing=()
for need in "${NEEDS[@]}"; do
  read -r check package who <<<"${need}"
  [[ ",${who}," == *",${MODE},"* ]] || continue
  have "${check}" || missing+=("${package}")
done

if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ "$(id -u)" -eq 0 ]]; then
    echo "[setup] apt-get install ${missing[*]}" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    # The package starts its own server on port 6379; the tests start theirs on free ports.
    if [[ " ${missing[*]} " == *" redis-server "* ]]; then service redis-server stop >/dev/null 2>&1 || true; fi
  elif [[ "${MODE}" == e2e ]]; then
    echo "e2e setup: missing Debian packages: ${missing[*]} (as root: apt-get install -y ${missing[*]}; or run npm run test:e2e as root)" >&2
    exit 1
  else
    echo "bench setup: missing Debian packages: ${missing[*]} (the targets that need them are skipped; as root npm run bench installs them)" >&2
    exit 0
  fi
fi

[[ "${MODE}" == e2e ]] || exit 0

# Go is the machine's toolchain (Debian's is too old for Kubernetes): named, not installed.
command -v go >/dev/null || { echo "e2e setup: the Go toolchain is missing (go on PATH): the control plane, Ollama and the collector are built with it" >&2; exit 1; }

# The Go compiler collects garbage often at the default GOGC=100: at 400 a cold build of kwok took
# 96 s against 108 (CPU 13 % less, each compile's peak memory 1.0 -> 1.1 GB). Every Go build below
# gains it: the control plane, Ollama, the collector, kube-score.
export GOGC="${GOGC:-400}"

# Each build's own log goes to a file, shown when it fails: a cold run prints a line per component.
LOGS="${XDG_CACHE_HOME:-$HOME/.cache}/platform-ai-optimizer/setup-logs"
mkdir -p "${LOGS}"
build() {
  local what="$1" log="${LOGS}/$2.log" start=${SECONDS}
  shift 2
  if ! "$@" >/dev/null 2>"${log}"; then
    tail -n 40 "${log}" >&2
    echo "e2e setup: ${what} failed (its log: ${log})" >&2
    exit 1
  fi
  echo "[setup] ${what} ready in $((SECONDS - start))s" >&2
}
# Two lanes side by side. The compilers' lane (the control plane, Ollama's cgo build, the
# collector) keeps both cores busy; the other lane mostly waits on registries and disk (pip's
# wheels, podman's layers, npm), so beside the compilers it costs them little and its time is
# hidden. The real node's images come last: they package what both lanes built.
compilers() {
  build "control plane (cluster/build.sh)" cluster bash "${HERE}/cluster/build.sh"
  build "Ollama and its models (ollama/build.sh)" ollama bash "${HERE}/ollama/build.sh"
  build "OpenTelemetry Collector (otel/build.sh)" otel bash "${HERE}/otel/build.sh"
}
downloads() {
  build "vLLM (CPU) and its model (vllm/build.sh)" vllm bash "${HERE}/vllm/build.sh"
  build "Python clients (python/venv.sh)" python bash "${HERE}/python/venv.sh"
  build "spec fuzzer (python/fuzz-venv.sh)" py-fuzz bash "${HERE}/python/fuzz-venv.sh"
  build "Presidio analyzer (python/presidio-venv.sh)" py-presidio bash "${HERE}/python/presidio-venv.sh"
  build "botocore service models (aws/botocore.sh)" botocore bash "${HERE}/aws/botocore.sh"
  build "image (image/build.sh)" image bash "${HERE}/image/build.sh"
  build "chart linters (chart-lint/lint.sh --install)" chart-lint bash "${HERE}/chart-lint/lint.sh" --install
}
start=${SECONDS}
compilers & compilers_pid=$!
downloads & downloads_pid=$!
# Both lanes run to their end (a half-built cache is never left by one lane's failure killing
# the other); either one's failure fails setup, its log already shown.
failed=0
wait "${compilers_pid}" || failed=1
wait "${downloads_pid}" || failed=1
[[ ${failed} -eq 0 ]] || exit 1
build "real node images (image/node-images.sh)" node-images bash "${HERE}/image/node-images.sh"
echo "[setup] all ready in $((SECONDS - start))s" >&2
