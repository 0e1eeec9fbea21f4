/**
 * Names and constants of the API, defined once. The CRD YAML files beside this module
 * use the same group and kinds; a unit test keeps the two in agreement.
 */

export const API_GROUP = 'ai.platform';
export const API_VERSION = 'v1beta1';
export const API_GROUP_VERSION = `${API_GROUP}/${API_VERSION}`;

export const KINDS = {
  ModelDeployment: { kind: 'ModelDeployment', plural: 'modeldeployments', namespaced: true },
  ExternalProvider: { kind: 'ExternalProvider', plural: 'externalproviders', namespaced: true },
  NodeTemplate: { kind: 'NodeTemplate', plural: 'nodetemplates', namespaced: false },
  NodeConfiguration: { kind: 'NodeConfiguration', plural: 'nodeconfigurations', namespaced: false },
  AutoscalerPolicy: { kind: 'AutoscalerPolicy', plural: 'autoscalerpolicies', namespaced: false },
  ApiKey: { kind: 'ApiKey', plural: 'apikeys', namespaced: true },
  Budget: { kind: 'Budget', plural: 'budgets', namespaced: true },
  McpServer: { kind: 'McpServer', plural: 'mcpservers', namespaced: true },
  RoutingPolicy: { kind: 'RoutingPolicy', plural: 'routingpolicies', namespaced: true },
  IdentityProvider: { kind: 'IdentityProvider', plural: 'identityproviders', namespaced: true },
  Guardrail: { kind: 'Guardrail', plural: 'guardrails', namespaced: true },
} as const;

export type KindName = keyof typeof KINDS;

/**
 * The wire dialects callers speak, each an endpoint's (proxy/endpoints/dialects.ts says how each
 * errs and ends its streams).
 */
export type CallerDialect =
  | 'openai-chat'
  | 'openai-completions'
  | 'openai-embeddings'
  | 'openai-responses'
  | 'anthropic-messages';

/**
 * Every wire dialect the gateway speaks: the callers', and those only an upstream speaks (Bedrock's
 * Converse), reached through a translator (crds/providers/ say which each provider serves natively).
 */
export type Dialect = CallerDialect | 'bedrock-converse';

/** The audience a workload's projected ServiceAccount token names to call the gateway (an IdentityProvider's spec.kubernetes). */
export const TOKEN_AUDIENCE = 'platform-ai-optimizer';

/** The operator's ServiceAccount (in platform-agent): the one caller whose token may write audit records. */
export const OPERATOR_SERVICE_ACCOUNT = 'platform-ai-optimizer-operator';

/** Namespace where model servers (ModelDeployments and what they own) live. */
export const LLMS_NAMESPACE = 'platform-llms';
/** Namespace of the proxy, the operator and ExternalProviders. */
export const AGENT_NAMESPACE = 'platform-agent';
/**
 * The Pod Security level platform-llms enforces (label pod-security.kubernetes.io/enforce): the
 * model servers the operator deploys pass `restricted`, the strictest level.
 */
export const LLMS_POD_SECURITY = { 'pod-security.kubernetes.io/enforce': 'restricted' } as const;
/** The uid model servers run as: Ollama needs no root, only writable HOME and models dirs. */
export const MODEL_SERVER_UID = 10001;

/** The node template the operator creates and owns for hosted models. */
export const LLM_NODE_TEMPLATE = 'llms-by-platform';
/** The singleton AutoscalerPolicy. */
export const AUTOSCALER_POLICY_NAME = 'cluster';

/**
 * Taint key on nodes of a template, and the toleration key (operator Exists) model servers
 * and the GPU device-plugin DaemonSet carry. Nodes also carry it as a label whose value is
 * the template name, which model servers select on.
 */
export const NODE_TEMPLATE_KEY = 'scheduling.platform/node-template';

/** Node labels describing GPUs, put on nodes by the platform autoscaler. */
export const GPU_MODEL_LABEL = 'scheduling.platform/gpu-model';
export const GPU_COMPUTE_CAPABILITY_LABEL = 'scheduling.platform/gpu-compute-capability';
/** Extended resource of the NVIDIA device plugin. */
export const GPU_RESOURCE = 'nvidia.com/gpu';

/**
 * Secret in platform-llms whose key `token` is the Hugging Face token vLLM's model fetch uses for
 * gated models (Llama); optional, and only the fetch container sees it.
 */
export const HUGGING_FACE_TOKEN_SECRET = 'huggingface-token';

export const PROXY_SERVICE_PORT = 443;

/** In-cluster DNS suffix of ModelDeployment endpoints. */
const CLUSTER_DOMAIN = 'cluster.local';

/** Labels put on every object the operator creates. */
export const MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by';
export const MANAGED_BY_VALUE = 'platform-ai-optimizer';
export const MODEL_DEPLOYMENT_LABEL = `${API_GROUP}/model-deployment`;

/** The Secret holding an ApiKey's key (owned by the ApiKey), and the data key the key is under. */
export const apiKeySecretName = (apiKeyName: string): string => `apikey-${apiKeyName}`;
export const API_KEY_SECRET_KEY = 'key';
/**
 * The Secret holding the key MCP session ids are sealed with (proxy/mcp/session.ts), shared by
 * every proxy replica so any of them serves any session; the operator creates it once, with a
 * random key, and never reads it.
 */
export const MCP_SESSIONS_SECRET = 'platform-ai-optimizer-mcp-sessions';
export const MCP_SESSIONS_KEY = 'key';
/** The tag key every request of an ApiKey carries with the key's team as value. */
export const TEAM_TAG = 'team';

/** The RoutingPolicy that serves `model: "auto"` and, when it is enabled, routes for the organization. */
export const DEFAULT_ROUTING_POLICY = 'default';
/** The model name that asks for routing: `auto` (the default policy) or `<policy>/auto`. */
export const AUTO_MODEL = 'auto';
/** A caller's per-request switch of routing: `true` or `false`. */
export const ROUTING_HEADER = 'x-routing-enabled';
/** Answer headers: the model that served, and why it was chosen. */
export const ROUTED_MODEL_HEADER = 'x-routed-model';
export const ROUTING_REASON_HEADER = 'x-routing-reason';
/**
 * The proxy's and the operator's switch of the routing scorer's built-in embedding (Helm value
 * routing.builtInEmbedding): "false" keeps its table out of the proxy's memory, and policies that
 * name no embedding model then score on measured features only (their status says so).
 */
const BUILT_IN_EMBEDDING_ENV = 'ROUTING_BUILTIN_EMBEDDING';
export const builtInEmbeddingOn = (env: Readonly<Record<string, string | undefined>>): boolean =>
  env[BUILT_IN_EMBEDDING_ENV] !== 'false';
/** The label (value "true") a ConfigMap of routing examples (a RoutingPolicy's examplesFrom) must carry to be read. */
export const ROUTING_EXAMPLES_LABEL = `${API_GROUP}/routing-examples`;

/** Keys of the Secret an AccessKey ExternalProvider references. */
export const ACCESS_KEY_ID_KEY = 'accessKeyId';
export const SECRET_ACCESS_KEY_KEY = 'secretAccessKey';

/** Deadline for a ModelDeployment to become Running. */
export const DEPLOYMENT_TIMEOUT_MS = 25 * 60 * 1000;

/** In-cluster URL of a model server's Service. */
export function modelServerEndpoint(serviceName: string, port: number): string {
  return `http://${serviceName}.${LLMS_NAMESPACE}.svc.${CLUSTER_DOMAIN}:${port}`;
}

/** ConfigMap (in platform-agent) whose `bedrock-prices.yaml` overrides the shipped Bedrock price table. */
export const PRICES_CONFIGMAP = 'platform-ai-optimizer-prices';
export const PRICES_KEY = 'bedrock-prices.yaml';

/**
 * The product's release: package.json's version and both charts' appVersion (a unit test holds
 * them equal). Traces carry it as service.version.
 */
export const PRODUCT_VERSION = '0.2.0';

/**
 * The Node.js major line the product runs on (package.json engines, the image's NODE_VERSION; a
 * unit test holds them equal). Older ones are refused at start: on Node 20 the SQLite module
 * (better-sqlite3 13) dies with a segmentation fault and no message.
 */
export const NODE_MAJOR = 24;

/** Why this Node.js cannot run the product, or undefined when it can. */
export function unsupportedNode(version: string): string | undefined {
  const major = Number(/^v?(\d+)\./.exec(version)?.[1]);
  if (major >= NODE_MAJOR) return undefined;
  return `Node.js ${NODE_MAJOR} or newer is required, this is ${version}: start it with npm (npm start, npm run proxy, npm run operator), which brings Node ${NODE_MAJOR} on an older machine, or run eval "$(bash e2e/node/node.sh env)" first`;
}
