#!/usr/bin/env bash
# Build a real Kubernetes control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler), etcd and kwok, and the real node's kubelet, kube-proxy, kube-router
# (NetworkPolicy), device plugin and pause program, from the Go module proxy with the
# local Go toolchain.
#
# Why from source: the e2e environment has no docker and no GitHub release
# downloads, but it does have the Go module proxy. Every component is a Go
# module, so `go build` against the proxy is the one distribution channel we
# can rely on.
#
# Output: binaries in
#   ${XDG_CACHE_HOME:-$HOME/.cache}/platform-ai-optimizer/k8s-<KUBERNETES_VERSION>/bin/
# The bin dir path is the LAST line of stdout; everything else goes to stderr,
# so callers can do:  BIN_DIR="$(e2e/cluster/build.sh | tail -n1)"
#
# A cold build (empty module and build caches) takes ~9 minutes on 2 cores,
# most of it compiling kube-apiserver & co. Warm runs only compare stamp files
# and exit immediately.
#
# Nothing is written into the repo: the throwaway Go modules used to drive the
# builds live in a temp dir that is removed on exit.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=SCRIPTDIR/versions.env
source "${SCRIPT_DIR}/versions.env"

: "${KUBERNETES_VERSION:?missing in versions.env}"
: "${ETCD_VERSION:?missing in versions.env}"
: "${KWOK_VERSION:?missing in versions.env}"
: "${KUBE_ROUTER_VERSION:?missing in versions.env}"
: "${COREDNS_VERSION:?missing in versions.env}"

# k8s.io/kubernetes vX.Y.Z publishes its staging repos (k8s.io/api, ...) as
# v0.Y.Z. Derive it so versions.env has a single Kubernetes knob.
K8S_STAGING_VERSION="v0.${KUBERNETES_VERSION#v1.}"

CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/platform-ai-optimizer"
BIN_DIR="${CACHE_ROOT}/k8s-${KUBERNETES_VERSION}/bin"

# One stamp per component, holding the exact module@version it was built from.
# The dir name only carries the Kubernetes version, so bumping ETCD_VERSION or
# KWOK_VERSION must rebuild just that component; the stamp is what detects it.
# Stamps are written only after the binaries are in place, so an interrupted
# build is never mistaken for a finished one.
# kubelet and kube-proxy run the real node (e2e/cluster/real-node.ts) beside kwok's fake ones.
KUBE_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
KUBE_STAMP="k8s.io/kubernetes@${KUBERNETES_VERSION}"
ETCD_STAMP="go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
KWOK_STAMP="sigs.k8s.io/kwok@${KWOK_VERSION}"
KUBE_ROUTER_STAMP="github.com/cloudnativelabs/kube-router/v2@${KUBE_ROUTER_VERSION}"
# The real node's own helpers (device-plugin/, pause/): rebuilt when their source changes.
NODE_HELPERS_STAMP="helpers-$(cat "${SCRIPT_DIR}"/{device-plugin,pause,coredns}/main.go | sha256sum | cut -c1-16)-${KUBERNETES_VERSION}-coredns-${COREDNS_VERSION}"

log() { printf '[build.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# up_to_date STAMP_NAME EXPECTED BIN...: true if the stamp matches and every
# binary exists and is executable.
up_to_date() {
  local name="$1" want="$2"
  shift 2
  [[ -f "${BIN_DIR}/.stamp-${name}" ]] || return 1
  [[ "$(<"${BIN_DIR}/.stamp-${name}")" == "${want}" ]] || return 1
  local b
  for b in "$@"; do [[ -x "${BIN_DIR}/${b}" ]] || return 1; done
}

all_up_to_date() {
  up_to_date kube "${KUBE_STAMP}" "${KUBE_BINS[@]}" &&
    up_to_date etcd "${ETCD_STAMP}" etcd &&
    up_to_date kwok "${KWOK_STAMP}" kwok &&
    up_to_date kube-router "${KUBE_ROUTER_STAMP}" kube-router &&
    up_to_date node-helpers "${NODE_HELPERS_STAMP}" pao-device-plugin pao-pause pao-coredns
}

# Fast path: no go invocation, no lock, just file checks.
if all_up_to_date; then
  echo "${BIN_DIR}"
  exit 0
fi

command -v go >/dev/null || { log "error: 'go' not found on PATH"; exit 1; }

mkdir -p "${BIN_DIR}"

# Serialize concurrent builds (e.g. parallel test jobs on a fresh machine):
# the second caller waits, then usually finds everything already built.
exec 9>"${CACHE_ROOT}/.build.lock"
if command -v flock >/dev/null; then
  if ! flock -n 9; then
    log "another build.sh is running; waiting for it to finish"
    flock 9
  fi
  if all_up_to_date; then
    echo "${BIN_DIR}"
    exit 0
  fi
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/pao-k8s-build.XXXXXX")"
trap 'rm -rf "${WORK}"' EXIT

# The wrapper modules must be self-contained: ignore any go.work and make
# sure no GOFLAGS from the environment (e.g. -mod=vendor) change resolution.
export GOWORK=off
export GOFLAGS="-buildvcs=false"
# Static binaries, as upstream ships the control plane (no libc dependency).
export CGO_ENABLED=0

TOTAL_START=${SECONDS}
log "go: $(go version)"
log "versions: kubernetes=${KUBERNETES_VERSION} (staging ${K8S_STAGING_VERSION}) etcd=${ETCD_VERSION} kwok=${KWOK_VERSION}"
log "bin dir: ${BIN_DIR}"

# Binaries are built into a staging dir on the same filesystem and moved into
# place, so BIN_DIR never contains a half-written executable.
STAGE="$(mktemp -d "${CACHE_ROOT}/.stage.XXXXXX")"
trap 'rm -rf "${WORK}" "${STAGE}"' EXIT

# install_bins STAMP_NAME STAMP_VALUE BIN...: move built binaries into BIN_DIR
# and record the stamp last.
install_bins() {
  local name="$1" value="$2" b
  shift 2
  for b in "$@"; do mv -f "${STAGE}/${b}" "${BIN_DIR}/${b}"; done
  printf '%s\n' "${value}" >"${BIN_DIR}/.stamp-${name}"
}

# go_mod_field JSON FIELD: extract a string field from `go mod download -json`
# output without requiring jq.
go_mod_field() {
  sed -n "s/^[[:space:]]*\"$2\": \"\(.*\)\",\{0,1\}\$/\1/p" <<<"$1" | head -n1
}

build_kube() {
  local start=${SECONDS} mod="${WORK}/kube"
  mkdir -p "${mod}"
  log "kube: resolving k8s.io/kubernetes@${KUBERNETES_VERSION}"

  # k8s.io/kubernetes is not meant to be consumed as a dependency: its go.mod
  # requires every k8s.io/* staging module at v0.0.0 and points them at
  # ./staging/src/... with replace directives, which are ignored outside the
  # main module. We therefore read its go.mod and re-create those replaces
  # against the published staging versions.
  local info gomod_file info_file
  info="$(cd "${mod}" && go mod download -json "k8s.io/kubernetes@${KUBERNETES_VERSION}")"
  gomod_file="$(go_mod_field "${info}" GoMod)"
  info_file="$(go_mod_field "${info}" Info)"
  [[ -f "${gomod_file}" ]] || { log "error: no go.mod for k8s.io/kubernetes@${KUBERNETES_VERSION}"; return 1; }

  # Both single-line (`replace a => ./x`) and block forms are handled.
  local staging
  staging="$(awk '
    $1 == "replace" && $3 == "=>" && $4 ~ /^\.\/staging\// { print $2; next }
    $2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }
  ' "${gomod_file}" | sort -u)"
  [[ -n "${staging}" ]] || { log "error: no staging replaces found in ${gomod_file}"; return 1; }
  log "kube: $(wc -l <<<"${staging}") staging modules -> ${K8S_STAGING_VERSION}"

  # Mirror upstream's `go` and `godebug` lines: the main module's go version
  # selects GODEBUG defaults, so the binaries behave like the official ones.
  local go_line godebug_line
  go_line="$(grep -m1 '^go ' "${gomod_file}")"
  godebug_line="$(grep -m1 '^godebug ' "${gomod_file}" || true)"

  {
    echo "module wrapper"
    echo
    echo "${go_line}"
    [[ -z "${godebug_line}" ]] || echo "${godebug_line}"
    echo
    # `tool` directives (Go >= 1.24) make tidy keep the main packages'
    # dependency graph without a tools.go file.
    echo "tool ("
    local b
    for b in "${KUBE_BINS[@]}"; do echo "	k8s.io/kubernetes/cmd/${b}"; done
    echo ")"
    echo
    echo "require k8s.io/kubernetes ${KUBERNETES_VERSION}"
    echo
    echo "replace ("
    local m
    while read -r m; do echo "	${m} => ${m} ${K8S_STAGING_VERSION}"; done <<<"${staging}"
    echo ")"
  } >"${mod}/go.mod"

  log "kube: go mod tidy (downloads all dependencies on a cold module cache)"
  (cd "${mod}" && go mod tidy) >&2

  # Same version stamping as upstream hack/lib/version.sh so that
  # `kube-apiserver --version` and the /version endpoint (and thus
  # `kubectl version`) report the real release. buildDate is the release's
  # commit time from the proxy rather than "now", keeping builds reproducible.
  local minor build_date="" ldflags="-s -w" pkg kv key val
  minor="$(cut -d. -f2 <<<"${KUBERNETES_VERSION}")"
  [[ -f "${info_file}" ]] && build_date="$(sed -n 's/.*"Time": *"\([^"]*\)".*/\1/p' "${info_file}")"
  [[ -n "${build_date}" ]] || build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    for kv in "gitVersion=${KUBERNETES_VERSION}" "gitMajor=1" "gitMinor=${minor}" \
      "gitTreeState=clean" "buildDate=${build_date}"; do
      key="${kv%%=*}" val="${kv#*=}"
      ldflags+=" -X ${pkg}.${key}=${val}"
    done
  done

  # One `go build` for all three commands so shared packages are compiled
  # once. Tags match upstream's release build (hack/lib/golang.sh): notest
  # drops test-only code, grpcnotrace lets the linker drop x/net/trace.
  log "kube: go build ${KUBE_BINS[*]} (slow: ~all of Kubernetes is compiled)"
  local pkgs=()
  for b in "${KUBE_BINS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${b}"); done
  (cd "${mod}" && go build -trimpath -tags "selinux,notest,grpcnotrace" \
    -ldflags "${ldflags}" -o "${STAGE}/" "${pkgs[@]}") >&2

  install_bins kube "${KUBE_STAMP}" "${KUBE_BINS[@]}"
  log "kube: done in $((SECONDS - start))s"
}

build_etcd() {
  local start=${SECONDS} mod="${WORK}/etcd"
  mkdir -p "${mod}"
  log "etcd: building go.etcd.io/etcd/server/v3@${ETCD_VERSION}"

  # Upstream's etcd binary is the root module go.etcd.io/etcd/v3, whose go.mod
  # uses relative replaces (../api, ...), so `go install` cannot build it.
  # Its main.go is a one-liner around etcdmain.Main; reproduce it here.
  cat >"${mod}/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO

  # Take the `go` line from etcd's own go.mod so GODEBUG defaults match an
  # upstream build (`go mod init` would use the local toolchain's version).
  local info gomod_file go_line
  info="$(cd "${mod}" && go mod download -json "go.etcd.io/etcd/server/v3@${ETCD_VERSION}")"
  gomod_file="$(go_mod_field "${info}" GoMod)"
  [[ -f "${gomod_file}" ]] || { log "error: no go.mod for go.etcd.io/etcd/server/v3@${ETCD_VERSION}"; return 1; }
  go_line="$(grep -m1 '^go ' "${gomod_file}")"
  printf 'module etcdwrapper\n\n%s\n\nrequire go.etcd.io/etcd/server/v3 %s\n' \
    "${go_line}" "${ETCD_VERSION}" >"${mod}/go.mod"

  (
    cd "${mod}"
    go mod tidy
    go build -trimpath -ldflags "-s -w" -o "${STAGE}/etcd" .
  ) >&2

  install_bins etcd "${ETCD_STAMP}" etcd
  log "etcd: done in $((SECONDS - start))s"
}

build_kwok() {
  local start=${SECONDS}
  log "kwok: go install sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}"
  # kwok's go.mod has no replace directives, so `go install pkg@version` works
  # and needs no wrapper module. Run from the temp dir so no surrounding
  # go.mod is involved.
  (cd "${WORK}" && GOBIN="${STAGE}" go install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/kwok/cmd/kwok@${KWOK_VERSION}") >&2

  install_bins kwok "${KWOK_STAMP}" kwok
  log "kwok: done in $((SECONDS - start))s"
}

build_kube_router() {
  local start=${SECONDS}
  # Only its firewall (NetworkPolicy) controller runs on the real node: the advisory against
  # v2.1.0 (GHSA-phqm-jgc3-qf8g) is in its service proxy, which the node never starts. v2.1.0 is
  # the one version the module proxy serves here.
  log "kube-router: go install github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@${KUBE_ROUTER_VERSION}"
  (cd "${WORK}" && GOBIN="${STAGE}" go install -trimpath -ldflags "-s -w" \
    "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@${KUBE_ROUTER_VERSION}") >&2
  install_bins kube-router "${KUBE_ROUTER_STAMP}" kube-router
  log "kube-router: done in $((SECONDS - start))s"
}

# The device plugin (k8s.io/kubelet's deviceplugin/v1beta1 at the Kubernetes version), the
# pause program and the cluster DNS (CoreDNS with three plugins), each a main.go in this folder,
# built in a throwaway module.
build_node_helpers() {
  local start=${SECONDS} name
  for name in device-plugin pause coredns; do
    local mod="${WORK}/${name}"
    mkdir -p "${mod}"
    cp "${SCRIPT_DIR}/${name}/main.go" "${mod}/"
    printf 'module pao-e2e/%s\n\ngo 1.24\n' "${name}" >"${mod}/go.mod"
    if [[ "${name}" == device-plugin ]]; then
      (cd "${mod}" && go get "k8s.io/kubelet@${K8S_STAGING_VERSION}") >&2
    fi
    if [[ "${name}" == coredns ]]; then
      (cd "${mod}" && go get "github.com/coredns/coredns@${COREDNS_VERSION}") >&2
    fi
    (cd "${mod}" && go mod tidy && go build -trimpath -ldflags "-s -w" -o "${STAGE}/pao-${name}" .) >&2
  done
  install_bins node-helpers "${NODE_HELPERS_STAMP}" pao-device-plugin pao-pause pao-coredns
  log "node helpers: done in $((SECONDS - start))s"
}

# Small components first: they fail fast if the proxy or toolchain is broken.
up_to_date etcd "${ETCD_STAMP}" etcd || build_etcd
up_to_date kwok "${KWOK_STAMP}" kwok || build_kwok
up_to_date kube "${KUBE_STAMP}" "${KUBE_BINS[@]}" || build_kube
up_to_date node-helpers "${NODE_HELPERS_STAMP}" pao-device-plugin pao-pause pao-coredns || build_node_helpers
up_to_date kube-router "${KUBE_ROUTER_STAMP}" kube-router || build_kube_router

# Sanity check: the binaries run on this machine and the version stamping
# took effect (a wrong ldflags package path would silently report v0.0.0).
got="$("${BIN_DIR}/kube-apiserver" --version)"
log "kube-apiserver --version: ${got}"
if [[ "${got}" != "Kubernetes ${KUBERNETES_VERSION}" ]]; then
  log "error: expected 'Kubernetes ${KUBERNETES_VERSION}'"
  rm -f "${BIN_DIR}/.stamp-kube"
  exit 1
fi
log "etcd --version: $("${BIN_DIR}/etcd" --version | head -n1)"
log "kwok --version: $("${BIN_DIR}/kwok" --version)"
log "all binaries ready in $((SECONDS - TOTAL_START))s"
echo "${BIN_DIR}"
