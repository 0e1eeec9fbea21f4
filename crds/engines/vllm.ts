import type { V1Container } from '@kubernetes/client-node';
import { GPU_RESOURCE, HUGGING_FACE_TOKEN_SECRET } from '../constants.js';
import { type EngineModule, type EngineServerInput, MODELS_PATH, type NativeDialect } from './engine.js';
import { HARDENED } from './hardened.js';

/**
 * vLLM: a batching engine (continuous batching, paged KV cache with prefix caching), serving a
 * Hugging Face model. The init container fetches the weights into the model volume laid out as
 * huggingface_hub's cache (HF_HOME), once per volume and under a lock; the server then starts
 * with HF_HUB_OFFLINE=1, so no replica reaches the hub at run time and one filled by hand (an
 * air-gapped cluster's existingClaim) serves as it is. Its OpenAI server serves chat,
 * completions, embeddings (pooling models), Responses and Anthropic's Messages natively (the
 * pinned 0.32's routes), counts tokens (/v1/messages/count_tokens) and exports its queue and KV-cache use on
 * /metrics, which the proxy routes on. Telemetry is off (VLLM_NO_USAGE_STATS, DO_NOT_TRACK).
 */

const PORT = 8000;
const HOME = '/home/vllm';

/** What the fetch copies of a repository: weights, configs, tokenizer; never other formats' duplicates. */
const WEIGHT_PATTERNS = ['*.json', '*.safetensors', '*.model', '*.txt', '*.tiktoken', '*.jinja'];

/**
 * The init container's script (the image's python3 and huggingface_hub): the snapshot from the
 * volume when it is whole, else from the hub, unless MODEL_PULL_POLICY is Never. Replicas on one
 * shared volume fetch one at a time (flock), and whoever waited finds it there. Failures go to
 * the termination message, which ModelPulled reports, in words a user can act on.
 */
const FETCH_MODEL_SCRIPT = [
  'import fcntl, glob, os, sys',
  'from huggingface_hub import snapshot_download',
  'model, policy = os.environ["MODEL"], os.environ["MODEL_PULL_POLICY"]',
  `patterns = ${JSON.stringify(WEIGHT_PATTERNS)}`,
  'def fail(text):',
  '    print(text, file=sys.stderr)',
  '    try:',
  '        with open(os.environ.get("TERMINATION_MESSAGE_PATH", "/dev/termination-log"), "w") as f: f.write(text)',
  '    except OSError: pass',
  '    sys.exit(1)',
  'def present():',
  '    try: path = snapshot_download(model, local_files_only=True, allow_patterns=patterns)',
  '    except Exception: return False',
  '    return os.path.exists(os.path.join(path, "config.json")) and bool(glob.glob(os.path.join(path, "*.safetensors")))',
  'if present(): print(f"{model} is on the volume already: nothing to fetch"); sys.exit(0)',
  'if policy == "Never":',
  "    fail(f\"model {model} is not on PersistentVolumeClaim {os.environ.get('MODEL_CLAIM', '')} (spec.cache.existingClaim) as a Hugging Face cache (hub/models--ORG--NAME/snapshots/...), and this deployment never fetches: copy it there (README: Model cache), or remove spec.cache\")",
  'lock = open(os.path.join(os.environ["HF_HOME"], ".fetch.lock"), "a")',
  'try: fcntl.flock(lock, fcntl.LOCK_EX)',
  'except OSError: print("no lock on the volume: fetching unserialized", file=sys.stderr)',
  'if present(): print(f"{model} was fetched by another pod meanwhile"); sys.exit(0)',
  'try: snapshot_download(model, allow_patterns=patterns, token=os.environ.get("HF_TOKEN") or None)',
  'except Exception as e:',
  '    name = type(e).__name__',
  '    if name in ("GatedRepoError", "RepositoryNotFoundError") or "401" in str(e) or "403" in str(e):',
  '        fail(f"fetching {model} from Hugging Face failed ({name}): the id is wrong or the model is gated; for a gated model accept its license on huggingface.co and give the pods a token (README: vLLM)")',
  '    fail(f"fetching {model} from Hugging Face failed ({name}): {str(e)[:300]}")',
].join('\n');

/** Readiness that proves the model answers: one token generated (an embedding for pooling models). */
function modelAnswersScript(kind: EngineServerInput['kind']): string {
  const [path, body, answered] =
    kind === 'chat'
      ? ['/v1/completions', '{"model": m, "prompt": "hi", "max_tokens": 1}', 'choices']
      : ['/v1/embeddings', '{"model": m, "input": "hi"}', 'data'];
  return [
    'import json, os, sys, urllib.request as u',
    'm = os.environ["MODEL"]',
    `r = u.urlopen(u.Request("http://127.0.0.1:${PORT}${path}", data=json.dumps(${body}).encode(), headers={"content-type": "application/json"}), timeout=25)`,
    `sys.exit(0 if json.load(r).get("${answered}") else 1)`,
  ].join('\n');
}

function serverArgs(input: EngineServerInput): string[] {
  const { settings } = input;
  return [
    '--model',
    input.model,
    '--served-model-name',
    input.model,
    '--host',
    '0.0.0.0',
    '--port',
    String(PORT),
    '--max-model-len',
    String(settings.contextLength),
    '--max-num-seqs',
    String(settings.numParallel),
    // Shared prefixes (system prompts, conversations so far) are computed once per replica; the
    // proxy's prefix-aware routing sends them to the replica that holds them.
    '--enable-prefix-caching',
    ...(input.gpus > 1 ? ['--tensor-parallel-size', String(input.gpus)] : []),
    ...(input.kind === 'embedding' ? ['--runner', 'pooling', '--convert', 'embed'] : []),
  ];
}

function serverContainer(input: EngineServerInput): V1Container {
  const modelAnswers = { exec: { command: ['python3', '-c', modelAnswersScript(input.kind)] } };
  return {
    name: 'vllm',
    image: input.image,
    // The module rather than the `vllm` console script: the same in the CUDA image and CPU builds.
    command: ['python3', '-m', 'vllm.entrypoints.openai.api_server'],
    args: serverArgs(input),
    env: [
      ...vllm.env(input),
      // No hub at run time: the init container put the model on the volume.
      { name: 'HF_HUB_OFFLINE', value: '1' },
      { name: 'TRANSFORMERS_OFFLINE', value: '1' },
    ],
    ports: [{ name: 'http', containerPort: PORT, protocol: 'TCP' }],
    // Loading and compiling a large model takes minutes: up to 20 min to start.
    startupProbe: { ...modelAnswers, periodSeconds: 10, failureThreshold: 120, timeoutSeconds: 30 },
    readinessProbe: { ...modelAnswers, periodSeconds: 15, failureThreshold: 4, timeoutSeconds: 30 },
    livenessProbe: {
      httpGet: { path: '/health', port: 'http' },
      periodSeconds: 20,
      failureThreshold: 3,
      timeoutSeconds: 5,
    },
    // Its last log lines become the termination message: the status reads the failure from them.
    terminationMessagePolicy: 'FallbackToLogsOnError',
    resources: {
      requests: { cpu: input.settings.cpu, memory: input.memory, [GPU_RESOURCE]: String(input.gpus) },
      limits: { memory: input.memory, [GPU_RESOURCE]: String(input.gpus) },
    },
    volumeMounts: [...input.mounts, { name: 'shm', mountPath: '/dev/shm' }],
    securityContext: HARDENED,
  };
}

/**
 * vLLM refuses (400) an output limit above its --max-model-len, where Ollama bounds the answer by
 * its context silently: agents ask for far more than a small deployment runs with (Claude Code
 * sends max_tokens 32000). The limit is lowered to the context the server runs with, which is
 * all it could ever generate; a body without one, or a server whose context is unknown, passes
 * unchanged (no copy).
 */
export function boundOutput(fields: readonly string[]): NonNullable<NativeDialect['prepare']> {
  return (body, server) => {
    const most = server.contextLength;
    if (!most || !fields.some((f) => typeof body[f] === 'number' && (body[f] as number) > most)) return body;
    const out = { ...body };
    for (const f of fields) if (typeof out[f] === 'number' && (out[f] as number) > most) out[f] = most;
    return out;
  };
}

export const vllm: EngineModule = {
  name: 'VLLM',
  container: 'vllm',
  defaultImage: 'vllm/vllm-openai:v0.32.0',
  port: PORT,
  home: HOME,
  modelForm: {
    describe: 'a Hugging Face model id, organization/name (for example meta-llama/Llama-3.1-8B-Instruct)',
    example: 'meta-llama/Llama-3.1-8B-Instruct',
    rejected: 'llama3.1:8b',
    pattern: /^[A-Za-z0-9][A-Za-z0-9._-]{0,95}\/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$/,
  },
  env: (input) => [
    { name: 'MODEL', value: input.model },
    { name: 'HF_HOME', value: MODELS_PATH },
    { name: 'HOME', value: HOME },
    // Compiled kernels and graphs: the writable scratch volume, not the read-only image.
    { name: 'VLLM_CACHE_ROOT', value: '/tmp/vllm' },
    { name: 'TRITON_CACHE_DIR', value: '/tmp/triton' },
    { name: 'VLLM_NO_USAGE_STATS', value: '1' },
    { name: 'DO_NOT_TRACK', value: '1' },
  ],
  fetchContainer: (input) => ({
    name: 'pull-model',
    image: input.image,
    command: ['python3', '-c', FETCH_MODEL_SCRIPT],
    env: [
      ...vllm.env(input),
      { name: 'MODEL_PULL_POLICY', value: input.pullPolicy },
      ...(input.claimName ? [{ name: 'MODEL_CLAIM', value: input.claimName }] : []),
      // Gated models (Llama) need a token; the Secret is optional, and only this container sees it.
      {
        name: 'HF_TOKEN',
        valueFrom: { secretKeyRef: { name: HUGGING_FACE_TOKEN_SECRET, key: 'token', optional: true } },
      },
    ],
    volumeMounts: input.mounts,
    securityContext: HARDENED,
    resources: { requests: { cpu: input.fetchCpu, memory: '1Gi' } },
  }),
  serverContainer,
  extraVolumes: [{ name: 'shm', emptyDir: { medium: 'Memory', sizeLimit: '2Gi' } }],
  dialects: {
    'openai-chat': { path: '/v1/chat/completions', prepare: boundOutput(['max_tokens', 'max_completion_tokens']) },
    'openai-completions': { path: '/v1/completions', prepare: boundOutput(['max_tokens']) },
    'openai-embeddings': { path: '/v1/embeddings' },
    'openai-responses': { path: '/v1/responses', prepare: boundOutput(['max_output_tokens']) },
    'anthropic-messages': { path: '/v1/messages', prepare: boundOutput(['max_tokens']) },
  },
  countTokens: '/v1/messages/count_tokens',
  modelInfo: 'openai-models',
  loadSignals: {
    path: '/metrics',
    waiting: 'vllm:num_requests_waiting',
    running: 'vllm:num_requests_running',
    kvCacheUsage: 'vllm:kv_cache_usage_perc',
  },
  failures: [
    {
      text: /CUDA out of memory|No available memory for the cache blocks|larger than the maximum number of tokens that can be stored in KV cache|Insufficient memory|OutOfMemoryError/i,
      reason: 'ModelTooLarge',
      message:
        'the model {model} with its KV cache does not fit the GPU memory: choose a node template with a larger GPU (spec.nodeTemplate), or lower spec.server.contextLength (--max-model-len) or spec.server.numParallel',
    },
    {
      text: /LocalEntryNotFoundError|RepositoryNotFoundError|GatedRepoError|is not a local folder and is not a valid model identifier|does not appear to have a file named|Cannot find any model weights|offline mode/i,
      reason: 'ModelWeightsMissing',
      message:
        "the model {model}'s weights are not on the model volume: check the Hugging Face id, give the pods a token for a gated model, or fill spec.cache.existingClaim with the model's snapshot",
    },
    {
      text: /Bfloat16 is only supported on GPUs with compute capability|no kernel image is available|only supports Ampere GPUs or newer|compute capability .* (is )?(not supported|too low)|No CUDA GPUs are available/i,
      reason: 'GPUUnsupported',
      message:
        'the GPU of the node cannot run {model} with vLLM (it needs compute capability 8.0+ for bf16): choose a node template with a newer GPU type (see the hosted-models API gpu.types)',
    },
    {
      text: /Model architectures? .* (are|is) not supported|not supported for now|Unrecognized model/i,
      reason: 'ModelNotSupported',
      message: "this vLLM release cannot load {model}'s architecture: choose a model the catalog lists for vLLM",
    },
  ],
};
