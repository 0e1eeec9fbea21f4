#!/usr/bin/env bash
# Build a minimal real OpenTelemetry Collector from the Go module proxy, with the collector's
# own builder (ocb, go.opentelemetry.io/collector/cmd/builder) at the pinned release:
#   receivers:  otlp      (OTLP/gRPC and OTLP/HTTP)
#   processors: batch
#   exporters:  otlp_http (`otlphttp` is its deprecated alias; with `encoding: json` the tests
#               read OTLP/JSON ExportTraceServiceRequest bodies)
#   providers:  file, env, yaml
#
# Why ocb and not `go install go.opentelemetry.io/collector/cmd/otelcorecol@version`: otelcorecol is
# not a published module, and the root module go.opentelemetry.io/collector that the proxy falls
# back to "does not contain package .../cmd/otelcorecol". ocb itself has no replace directives,
# installs with `go install`, and generates the main package and go.mod (all components at one
# consistent release) that upstream distributions are built from.
#
# Output: the LAST line of stdout is the path of the binary,
#   ${XDG_CACHE_HOME:-$HOME/.cache}/platform-ai-optimizer/otelcol-<OTELCOL_VERSION>/bin/otelcol
# Everything else goes to stderr. Warm runs only compare the stamp and exit.
#
# Cold (empty module and build caches): ~5 min on 2 cores, most of it compiling gRPC, protobuf and
# the OpenTelemetry SDK; the binary is ~33 MB. Builds run with GOFLAGS=-p=1 unless the caller sets
# GOFLAGS, so a parallel build on the same machine is not starved.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=SCRIPTDIR/versions.env
source "${SCRIPT_DIR}/versions.env"
: "${OTELCOL_VERSION:?missing in versions.env}" "${OTELCOL_STABLE_VERSION:?missing in versions.env}"

CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/platform-ai-optimizer"
OUT="${CACHE_ROOT}/otelcol-${OTELCOL_VERSION}"
BIN="${OUT}/bin/otelcol"

# The ocb manifest; @OUTPUT_PATH@ is filled in with the temp dir at build time. The stamp holds a
# hash of this text, so adding a component (or bumping a version) rebuilds.
MANIFEST="dist:
  module: platform-ai-optimizer/e2e/otelcol
  name: otelcol
  description: Minimal OpenTelemetry Collector for the platform-ai-optimizer e2e tests
  version: ${OTELCOL_VERSION#v}
  output_path: @OUTPUT_PATH@
receivers:
  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver ${OTELCOL_VERSION}
processors:
  - gomod: go.opentelemetry.io/collector/processor/batchprocessor ${OTELCOL_VERSION}
exporters:
  - gomod: go.opentelemetry.io/collector/exporter/otlphttpexporter ${OTELCOL_VERSION}
providers:
  - gomod: go.opentelemetry.io/collector/confmap/provider/envprovider ${OTELCOL_STABLE_VERSION}
  - gomod: go.opentelemetry.io/collector/confmap/provider/fileprovider ${OTELCOL_STABLE_VERSION}
  - gomod: go.opentelemetry.io/collector/confmap/provider/yamlprovider ${OTELCOL_STABLE_VERSION}
telemetry:
  gomod: go.opentelemetry.io/collector/service ${OTELCOL_VERSION}
  import: go.opentelemetry.io/collector/service/telemetry/otelconftelemetry
"
STAMP="go.opentelemetry.io/collector@${OTELCOL_VERSION} manifest=$(sha256sum <<<"${MANIFEST}" | cut -c1-16)"

log() { printf '[otel/build.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
up_to_date() { [[ -f "${OUT}/.stamp" && "$(<"${OUT}/.stamp")" == "${STAMP}" && -x "${BIN}" ]]; }

# Fast path: no go invocation, no lock, just file checks.
if up_to_date; then echo "${BIN}"; exit 0; fi

command -v go >/dev/null || { log "error: 'go' not found on PATH"; exit 1; }
mkdir -p "${OUT}/bin"

# Serialize concurrent builds: the second caller waits, then finds the binary built.
exec 9>"${CACHE_ROOT}/.otelcol-build.lock"
if ! flock -n 9; then
  log "another otel/build.sh is running; waiting for it to finish"
  flock 9
fi
if up_to_date; then echo "${BIN}"; exit 0; fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/pao-otelcol-build.XXXXXX")"
trap 'rm -rf "${WORK}"' EXIT
START=${SECONDS}

# Self-contained module resolution: no surrounding go.work, no -mod=vendor from the environment.
export GOWORK=off
export GOFLAGS="${GOFLAGS:--p=1} -buildvcs=false"
log "go: $(go version); GOFLAGS=${GOFLAGS}"

log "go install go.opentelemetry.io/collector/cmd/builder@${OTELCOL_VERSION}"
(cd "${WORK}" && GOBIN="${WORK}/gobin" CGO_ENABLED=0 go install -trimpath -ldflags="-s -w" \
  "go.opentelemetry.io/collector/cmd/builder@${OTELCOL_VERSION}") >&2

# ocb generates main.go, components.go and go.mod, runs `go mod tidy` and `go mod download`, and
# builds with `go build -trimpath -ldflags="-s -w"` (CGO_ENABLED=0: a static binary). Strict
# versioning: it fails if the resolved otelcol or a component ends up at another minor release.
sed "s|@OUTPUT_PATH@|${WORK}/src|" <<<"${MANIFEST}" >"${WORK}/manifest.yaml"
log "ocb: generate and build otelcol ${OTELCOL_VERSION} (cold: ~5 min on 2 cores)"
# TMPDIR: ocb always makes a default output dir (otelcol-distribution*) in it, even unused.
TMPDIR="${WORK}" "${WORK}/gobin/builder" --config "${WORK}/manifest.yaml" --skip-strict-versioning=false >&2

# Stage beside the final path, then move: BIN is never a half-written executable.
cp "${WORK}/src/otelcol" "${BIN}.tmp"
mv -f "${BIN}.tmp" "${BIN}"
got="$("${BIN}" --version 2>&1 || true)"
[[ "${got}" == *"${OTELCOL_VERSION#v}"* ]] || { log "error: otelcol --version said: ${got}"; exit 1; }
components="$("${BIN}" components 2>&1 || true)"
for c in otlp otlp_http batch; do
  grep -q -- "name: ${c}\$" <<<"${components}" || { log "error: component ${c} missing:"$'\n'"${components}"; exit 1; }
done
printf '%s\n' "${STAMP}" >"${OUT}/.stamp"
log "${got}: $(du -h "${BIN}" | cut -f1), built in $((SECONDS - START))s"
echo "${BIN}"
