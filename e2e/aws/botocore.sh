#!/usr/bin/env bash
# botocore's service models of the AWS APIs the AWS double (e2e/doubles/aws.ts) stands in for,
# from the pinned botocore wheel on PyPI: bedrock-runtime (Converse, ConverseStream, InvokeModel),
# bedrock (ListFoundationModels, ListInferenceProfiles) and sts (AssumeRole). The wheel is only
# downloaded and unpacked (nothing is installed); newer wheels ship the models gzipped.
#
# Output: the LAST line of stdout is the cache dir holding <service>.json (the service-2.json of
# the newest API version the wheel has for that service). Everything else goes to stderr. Warm
# runs only compare the stamp and exit.
set -euo pipefail

BOTOCORE_VERSION=1.44.5
SERVICES=(bedrock-runtime bedrock sts)

CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/platform-ai-optimizer"
OUT="${CACHE_ROOT}/botocore-${BOTOCORE_VERSION}"
want="botocore==${BOTOCORE_VERSION} ${SERVICES[*]}"
ready() { [[ -f "${OUT}/.stamp" && "$(<"${OUT}/.stamp")" == "${want}" ]]; }

if ready; then echo "${OUT}"; exit 0; fi
mkdir -p "${CACHE_ROOT}"
exec 9>"${CACHE_ROOT}/.botocore.lock"
flock 9
if ready; then echo "${OUT}"; exit 0; fi

start=${SECONDS}
WORK="$(mktemp -d "${TMPDIR:-/tmp}/pao-botocore.XXXXXX")"
trap 'rm -rf "${WORK}"' EXIT
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary :all: \
  --dest "${WORK}" "botocore==${BOTOCORE_VERSION}" >&2
wheel="$(ls "${WORK}"/botocore-"${BOTOCORE_VERSION}"-*.whl)"
rm -rf "${OUT}"
mkdir -p "${OUT}"
python3 - "${wheel}" "${OUT}" "${SERVICES[@]}" <<'PY' >&2
import gzip, re, sys, zipfile
wheel, out, services = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as z:
    names = z.namelist()
    for service in services:
        pattern = re.compile(rf"^botocore/data/{re.escape(service)}/(\d{{4}}-\d{{2}}-\d{{2}})/service-2\.json(\.gz)?$")
        found = sorted((m.group(1), n) for n in names if (m := pattern.match(n)))
        if not found:
            sys.exit(f"[aws/botocore.sh] no service-2.json for {service} in {wheel}")
        version, name = found[-1]
        data = z.read(name)
        if name.endswith(".gz"):
            data = gzip.decompress(data)
        with open(f"{out}/{service}.json", "wb") as f:
            f.write(data)
        print(f"[aws/botocore.sh] {service}: {name}", file=sys.stderr)
PY
printf '%s\n' "${want}" >"${OUT}/.stamp"
echo "[aws/botocore.sh] botocore ${BOTOCORE_VERSION} models in $((SECONDS - start))s" >&2
echo "${OUT}"
