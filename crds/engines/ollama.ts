import type { V1Container } from '@kubernetes/client-node';
import { foldSystemMessages } from '../anthropic-system-messages.js';
import { GPU_RESOURCE } from '../constants.js';
import { type EngineModule, type EngineServerInput, MODELS_PATH } from './engine.js';
import { HARDENED } from './hardened.js';

/**
 * Ollama: one model per server, pulled from its library by name:tag into the model volume by an
 * init container, so "ModelPulled" is observable as that container's completion; readiness has
 * the model generate a token, so Ready means the model answers. Its OpenAI-compatible /v1
 * serves every caller dialect (0.17: chat, completions, embeddings, Responses, Anthropic's
 * Messages). It exports no queue or cache metrics: the proxy balances on its own in-flight count.
 */

const PORT = 11434;
/** Ollama writes its identity key under $HOME/.ollama: a writable volume, not the image's /root. */
const HOME = '/home/ollama';

/**
 * Readiness that proves the model answers, not only that its manifest exists: one request
 * through Ollama's API that needs the model loaded, and the finished answer looked for. A server
 * without the model (404), one that cannot load it, or one that hangs fails the probe. Ollama's
 * image has bash but neither curl nor wget, hence bash's /dev/tcp; HTTP/1.0 makes the server
 * close after answering.
 */
function modelAnswersScript(path: string, body: string, answered: string): string {
  return [
    `body='${body}'`,
    // biome-ignore lint/suspicious/noTemplateCurlyInString: bash parameter expansion (the port of OLLAMA_HOST)
    'exec 3<>"/dev/tcp/127.0.0.1/${OLLAMA_HOST##*:}" || exit 1',
    `printf 'POST ${path} HTTP/1.0\\r\\nHost: localhost\\r\\nContent-Type: application/json\\r\\nContent-Length: %d\\r\\n\\r\\n%s' "\${#body}" "$body" >&3`,
    `head -c 65536 <&3 | grep -q '${answered}'`,
  ].join('\n');
}

/**
 * The probe per kind of model: a chat model generates one token; an embedding model, which
 * Ollama refuses to generate with (400), embeds a word.
 */
export const MODEL_ANSWERS_SCRIPTS: Record<EngineServerInput['kind'], string> = {
  chat: modelAnswersScript(
    '/api/generate',
    `{"model":"'"$MODEL"'","prompt":"hi","stream":false,"options":{"num_predict":1}}`,
    '"done":true',
  ),
  embedding: modelAnswersScript('/api/embed', `{"model":"'"$MODEL"'","input":"hi"}`, '"embeddings":\\[\\['),
};

/**
 * The init container: the model from the volume when it is there (a restart, a new replica on
 * the shared cache), else from the registry, unless MODEL_PULL_POLICY is Never (an existing
 * claim filled by hand). Replicas starting together on one shared volume pull one at a time
 * under flock (util-linux, in the image), so two downloads of one blob never interleave, and
 * whoever waited finds the model and pulls nothing; without flock or locks on the volume it
 * pulls unserialized rather than not at all. Failures go to the termination message, which
 * ModelPulled reports. The server it starts for the pull is stopped, so only the exit counts.
 */
export const PULL_MODEL_SCRIPT = [
  'serve_log=$(mktemp)',
  'missing="model $MODEL is not on PersistentVolumeClaim $MODEL_CLAIM (spec.cache.existingClaim), and this deployment never pulls: copy the model onto the claim (README: Model cache), or remove spec.cache"',
  'fail() {',
  '  [ -s "$serve_log" ] && tail -n 20 "$serve_log" >&2',
  '  printf "%s\\n" "$1" >&2',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: shell parameter expansion (the kubelet's default path)
  '  printf "%s" "$1" >"${TERMINATION_MESSAGE_PATH:-/dev/termination-log}"',
  '  kill "$server" 2>/dev/null',
  '  exit 1',
  '}',
  'present() { ollama show "$MODEL" >/dev/null 2>&1; }',
  // An existing claim without Ollama's folders: say so, rather than how serve fails on it (a
  // read-only volume where it cannot make blobs/).
  'if [ "$MODEL_PULL_POLICY" = Never ] && [ ! -d "$OLLAMA_MODELS/manifests" ]; then fail "$missing"; fi',
  'ollama serve >"$serve_log" 2>&1 &',
  'server=$!',
  'until ollama list >/dev/null 2>&1; do',
  '  if ! kill -0 "$server" 2>/dev/null; then',
  '    fail "ollama serve exited before answering: $(grep -v "^ *$" "$serve_log" | tail -n 1)"',
  '  fi',
  '  sleep 0.5',
  'done',
  'if present; then',
  '  echo "$MODEL is on the volume already: nothing to pull"',
  'elif [ "$MODEL_PULL_POLICY" = Never ]; then',
  '  fail "$missing"',
  'else',
  '  if command -v flock >/dev/null 2>&1 && command exec 9>>"$OLLAMA_MODELS/.pull.lock"; then',
  '    flock 9 || echo "cannot lock $OLLAMA_MODELS/.pull.lock: pulling unserialized" >&2',
  '  else',
  '    echo "no lock on $OLLAMA_MODELS (no flock, or the volume refused the lock file): pulling unserialized" >&2',
  '  fi',
  '  if present; then',
  '    echo "$MODEL was pulled by another pod meanwhile: nothing to pull"',
  '  else',
  '    log=$(mktemp)',
  '    { ollama pull "$MODEL" 2>&1; echo $? >"$log.rc"; } | tee "$log"',
  '    [ "$(cat "$log.rc")" = 0 ] || fail "pulling $MODEL failed: $(tr "\\r" "\\n" <"$log" | grep "^Error" | tail -n 1)"',
  '  fi',
  'fi',
  'kill "$server"',
  'wait "$server"',
  'exit 0',
].join('\n');

/**
 * Ollama (0.17) reads only `max_tokens`: `max_completion_tokens`, OpenAI's current name for the
 * same limit, would be ignored and the model would generate until its context is full. The
 * stricter of the two wins when a caller sends both.
 */
function forOllama(body: Record<string, unknown>): Record<string, unknown> {
  const mct = body.max_completion_tokens;
  // Absent: nothing to do (no copy on the hot path); not a number nor null: the upstream's to refuse.
  if (mct !== null && typeof mct !== 'number') return body;
  const { max_completion_tokens: _, ...rest } = body;
  if (mct === null) return rest;
  const mt = rest.max_tokens;
  return { ...rest, max_tokens: typeof mt === 'number' ? Math.min(mt, mct) : mct };
}

function serverContainer(input: EngineServerInput): V1Container {
  const modelAnswers = { exec: { command: ['/bin/bash', '-c', MODEL_ANSWERS_SCRIPTS[input.kind]] } };
  const { settings } = input;
  return {
    name: 'ollama',
    image: input.image,
    args: ['serve'],
    env: [
      ...ollama.env(input),
      { name: 'OLLAMA_HOST', value: `0.0.0.0:${PORT}` },
      // Keep the model loaded: the first request after idle would otherwise pay the load.
      { name: 'OLLAMA_KEEP_ALIVE', value: '-1' },
      { name: 'OLLAMA_NUM_PARALLEL', value: String(settings.numParallel) },
      { name: 'OLLAMA_MAX_QUEUE', value: String(settings.maxQueue) },
      { name: 'OLLAMA_CONTEXT_LENGTH', value: String(settings.contextLength) },
      // One model per server: never unload it to make room for another.
      { name: 'OLLAMA_MAX_LOADED_MODELS', value: '1' },
    ],
    ports: [{ name: 'http', containerPort: PORT, protocol: 'TCP' }],
    // The first probe loads the model into GPU memory (minutes for 70b): up to 10 min to start.
    startupProbe: { ...modelAnswers, periodSeconds: 10, failureThreshold: 60, timeoutSeconds: 60 },
    // A busy server queues the probe behind real requests: be patient before declaring it unready.
    readinessProbe: { ...modelAnswers, periodSeconds: 15, failureThreshold: 4, timeoutSeconds: 30 },
    livenessProbe: { httpGet: { path: '/', port: 'http' }, periodSeconds: 20, failureThreshold: 3, timeoutSeconds: 5 },
    // Its last log lines become the termination message: the status reads the failure from them.
    terminationMessagePolicy: 'FallbackToLogsOnError',
    resources: {
      requests: { cpu: settings.cpu, memory: input.memory, [GPU_RESOURCE]: String(input.gpus) },
      limits: { memory: input.memory, [GPU_RESOURCE]: String(input.gpus) },
    },
    volumeMounts: input.mounts,
    securityContext: HARDENED,
  };
}

export const ollama: EngineModule = {
  name: 'Ollama',
  container: 'ollama',
  defaultImage: 'ollama/ollama:0.17.4',
  port: PORT,
  home: HOME,
  modelForm: {
    describe: 'an Ollama library name with its tag, lower case (for example llama3.1:8b)',
    example: 'llama3.1:8b',
    rejected: 'meta-llama/Llama-3.1-8B-Instruct',
    pattern: /^[a-z0-9][a-z0-9._-]*(\/[a-z0-9][a-z0-9._-]*)*(:[A-Za-z0-9][A-Za-z0-9._-]*)?$/,
  },
  env: (input) => [
    { name: 'MODEL', value: input.model },
    { name: 'OLLAMA_MODELS', value: MODELS_PATH },
    { name: 'HOME', value: HOME },
    // At start Ollama deletes blobs no manifest names: on a shared volume, a pull in progress.
    { name: 'OLLAMA_NOPRUNE', value: '1' },
  ],
  fetchContainer: (input) => ({
    name: 'pull-model',
    image: input.image,
    command: ['/bin/sh', '-c', PULL_MODEL_SCRIPT],
    env: [
      ...ollama.env(input),
      { name: 'OLLAMA_HOST', value: `127.0.0.1:${PORT}` },
      { name: 'MODEL_PULL_POLICY', value: input.pullPolicy },
      ...(input.claimName ? [{ name: 'MODEL_CLAIM', value: input.claimName }] : []),
    ],
    volumeMounts: input.mounts,
    securityContext: HARDENED,
    resources: { requests: { cpu: input.fetchCpu, memory: '1Gi' } },
  }),
  serverContainer,
  dialects: {
    'openai-chat': { path: '/v1/chat/completions', prepare: forOllama },
    'openai-completions': { path: '/v1/completions' },
    'openai-embeddings': { path: '/v1/embeddings' },
    'openai-responses': { path: '/v1/responses' },
    // Ollama refuses a system message inside messages, which Anthropic's spec allows: folded.
    'anthropic-messages': { path: '/v1/messages', prepare: foldSystemMessages },
  },
  modelInfo: 'ollama-show',
  failures: [
    {
      text: /requires more system memory|out of memory|cudaMalloc failed|unable to allocate CUDA/i,
      reason: 'ModelTooLarge',
      message:
        'the model {model} does not fit the memory of its GPU node: choose a node template with a larger GPU (spec.nodeTemplate), or lower spec.server.numParallel or spec.server.contextLength',
    },
    {
      text: /file does not exist|manifest unknown|model .* not found|no such file or directory.*blobs/i,
      reason: 'ModelWeightsMissing',
      message:
        "the model {model}'s weights are not on the model volume: check the name and tag against Ollama's library, or fill spec.cache.existingClaim with the model",
    },
    {
      text: /no kernel image is available|compute capability|unsupported gpu/i,
      reason: 'GPUUnsupported',
      message:
        "the GPU of the node is not one Ollama's build supports for {model}: choose a node template with a newer GPU type (see the hosted-models API's gpu.types)",
    },
    {
      text: /unknown model architecture|unsupported model/i,
      reason: 'ModelNotSupported',
      message:
        "this Ollama release cannot load {model}'s architecture: use a model the catalog lists for Ollama, or engine VLLM",
    },
  ],
};
