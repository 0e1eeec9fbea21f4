import yaml from 'js-yaml';
import type { ApiKey } from '../../crds/api-key.js';
import type { Budget } from '../../crds/budget.js';
import {
  AGENT_NAMESPACE,
  API_GROUP,
  API_VERSION,
  LLMS_NAMESPACE,
  MCP_SESSIONS_SECRET,
  PRICES_CONFIGMAP,
  PRICES_KEY,
  ROUTING_EXAMPLES_LABEL,
} from '../../crds/constants.js';
import type { ExternalProvider } from '../../crds/external-provider.js';
import type { Guardrail } from '../../crds/guardrail.js';
import { clusterIssuerApi } from '../../crds/identity/cluster-issuer.js';
import { getJson } from '../../crds/identity/get-json.js';
import type { IdentityProvider } from '../../crds/identity-provider.js';
import { type EndpointSlice, readyUrls, SERVICE_NAME_LABEL } from '../../crds/kube/endpoint-slices.js';
import { Informer } from '../../crds/kube/informer.js';
import type { KubeAccess } from '../../crds/kube/kube-access.js';
import { KubeApiError, KubeClient, resourcePath } from '../../crds/kube/kube-client.js';
import { NamedSecrets } from '../../crds/kube/named-secrets.js';
import type { McpServer } from '../../crds/mcp-server.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import type { SecretLookup } from '../../crds/providers/aws-credentials.js';
import { ROUTING_TIERS, type RoutingExample, type RoutingPolicy, type RoutingTier } from '../../crds/routing-policy.js';
import { ApiKeys, keyPolicy, policyOf } from '../access/auth.js';
import { type TagBudget, tagBudgetOf } from '../access/budgets.js';
import { Identities } from '../identity/identities.js';
import { buildRoutes, type RouteTable } from '../serving/routes.js';

/**
 * The proxy's view of a cluster: ModelDeployments and ExternalProviders (routes), McpServers,
 * RoutingPolicies with the ConfigMaps of examples they name, the price overrides, and exactly the
 * Secrets it uses (its API keys, the access keys providers name and the credentials McpServers
 * name), each watched by name so that RBAC can grant those and no others; every change rebuilds
 * the routing table or the key set, or is told to the MCP or routing listener.
 */

export const API_KEYS_SECRET = 'platform-ai-optimizer-api-keys';
export { PRICES_CONFIGMAP, PRICES_KEY } from '../../crds/constants.js';

/**
 * Ready replicas of each Service in platform-llms: base URLs of its slices' ready endpoints on the
 * port named http (the model server's).
 */
export function replicasByService(slices: EndpointSlice[]): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const slice of slices) {
    const service = slice.metadata?.labels?.[SERVICE_NAME_LABEL];
    if (!service) continue;
    const urls = out.get(service) ?? [];
    out.set(service, urls);
    urls.push(...readyUrls(slice, 'http'));
  }
  for (const urls of out.values()) urls.sort();
  return out;
}

interface ConfigMap {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string };
  data?: Record<string, string>;
}

/** The examples a ConfigMap may add to a policy, as many as the schema takes inline. */
export const MAX_CONFIGMAP_EXAMPLES = 500;
/** A longer prompt is not an example (the schema's bound on an inline one). */
const MAX_EXAMPLE_PROMPT = 4000;

const isTier = (v: unknown): v is RoutingTier => ROUTING_TIERS.includes(v as RoutingTier);

/**
 * The examples of a ConfigMap's value: a YAML list of {tier, prompt}. Entries the schema would
 * refuse inline are dropped, not the whole list: one bad line in a long file keeps the rest.
 */
export function routingExamplesOf(text: string): RoutingExample[] {
  let list: unknown;
  try {
    list = yaml.load(text);
  } catch {
    return [];
  }
  if (!Array.isArray(list)) return [];
  const examples: RoutingExample[] = [];
  for (const item of list) {
    const { tier, prompt } = (item ?? {}) as { tier?: unknown; prompt?: unknown };
    if (!isTier(tier) || typeof prompt !== 'string' || prompt.length === 0 || prompt.length > MAX_EXAMPLE_PROMPT)
      continue;
    examples.push({ tier, prompt });
    if (examples.length === MAX_CONFIGMAP_EXAMPLES) break;
  }
  return examples;
}

/**
 * A policy as the routing listener takes it: examplesFrom replaced by its ConfigMap's examples
 * after the inline ones (none when the ConfigMap or its key is absent; the operator's status says
 * so), so that the listener only ever reads spec.scorer.semantic.examples.
 */
function withInlineExamples(policy: RoutingPolicy, data: (name: string) => ConfigMap['data']): RoutingPolicy {
  const semantic = policy.spec.scorer?.semantic;
  if (!semantic?.examplesFrom) return policy;
  const { examplesFrom, ...rest } = semantic;
  const text = data(examplesFrom.configMapName)?.[examplesFrom.key];
  const examples = [...(rest.examples ?? []), ...(text === undefined ? [] : routingExamplesOf(text))];
  return {
    ...policy,
    spec: { ...policy.spec, scorer: { ...policy.spec.scorer, semantic: { ...rest, examples } } },
  };
}

export interface ClusterSourceOptions {
  /** The API server and credentials: a kubeconfig's, or the pod's own (crds/kube/kube-access.ts). */
  kubeConfig: KubeAccess;
  routes: RouteTable;
  keys: ApiKeys;
  keysSecret?: string;
  /** A deployment's parallel slots per replica (spec.server.numParallel or the catalog's default). */
  slotsOf?: (md: ModelDeployment) => number | undefined;
  contextOf?: (md: ModelDeployment) => number | undefined;
  /** Told the Budgets (their tags and limits) now and on every change. */
  onBudgets?: (budgets: TagBudget[]) => void;
  /**
   * Told every McpServer of platform-agent now (once start() has the first list) and on every
   * change; the Secrets their spec.auth names are readable through secret(name) by then.
   */
  onMcpServers?: (servers: McpServer[]) => void;
  /**
   * Told every RoutingPolicy of platform-agent now (once start() has the first list) and on every
   * change of a policy or of a ConfigMap of examples, each with its examples inline (withInlineExamples).
   */
  onRoutingPolicies?: (policies: RoutingPolicy[]) => void;
  /** Told every Guardrail of platform-agent now (once start() has the first list) and on every change. */
  onGuardrails?: (guardrails: Guardrail[]) => void;
  onError?: (err: unknown) => void;
  /** Where providers' endpoint overrides are read (PAO_ENDPOINT_URL_*); process.env by default. */
  env?: NodeJS.ProcessEnv;
}

export class ClusterSource {
  private readonly mds: Informer<ModelDeployment>;
  private readonly eps: Informer<ExternalProvider>;
  private readonly slices: Informer<EndpointSlice>;
  private replicas = new Map<string, string[]>();
  private readonly secrets: NamedSecrets;
  private readonly prices: Informer<ConfigMap>;
  private readonly apiKeys: Informer<ApiKey>;
  private readonly budgets: Informer<Budget>;
  private readonly identityProviders: Informer<IdentityProvider>;
  private readonly mcpServers: Informer<McpServer>;
  private readonly routingPolicies: Informer<RoutingPolicy>;
  private readonly guardrails: Informer<Guardrail>;
  /** Only the ConfigMaps labelled as routing examples: the proxy reads no other ConfigMap for a policy. */
  private readonly routingExamples: Informer<ConfigMap>;
  readonly client: KubeClient;
  private readonly keysSecret: string;
  private pricesListener: ((yamlText: string) => void) | undefined;
  /** Set once start() has every first list: from then on each McpServer change reaches the listener. */
  private started = false;

  constructor(private readonly opts: ClusterSourceOptions) {
    const client = new KubeClient(opts.kubeConfig, { userAgent: 'platform-ai-optimizer-proxy' });
    this.client = client;
    const onError = opts.onError ?? (() => {});
    const agentPath = (plural: string) =>
      resourcePath({ group: API_GROUP, version: API_VERSION, plural, namespace: AGENT_NAMESPACE });
    // ApiKeys by digest: the proxy never reads the key Secrets the operator writes.
    this.apiKeys = new Informer<ApiKey>(client, { path: agentPath('apikeys'), onError });
    this.apiKeys.on(() => this.reloadApiKeys());
    this.budgets = new Informer<Budget>(client, { path: agentPath('budgets'), onError });
    this.budgets.on(() => this.reloadBudgets());
    // Issuers whose tokens stand for an ApiKey's grants; the cluster's own checked through the API server.
    opts.keys.identities ??= new Identities({
      cluster: clusterIssuerApi(client),
      getJson,
      onError: (provider, what, err) =>
        onError(new Error(`IdentityProvider ${provider}: its ${what} could not be read: ${(err as Error).message}`)),
    });
    this.identityProviders = new Informer<IdentityProvider>(client, { path: agentPath('identityproviders'), onError });
    this.identityProviders.on(() => opts.keys.identities?.set(this.identityProviders.list()));
    this.mcpServers = new Informer<McpServer>(client, { path: agentPath('mcpservers'), onError });
    this.mcpServers.on((event) => {
      // The first list is told by start(), once; resyncs change nothing.
      if (event === 'resync' || !this.started) return;
      // The Secrets first, so that a listener reading a server's credentials finds them tracked.
      void this.secrets
        .track(this.secretNames())
        .catch(onError)
        .then(() => this.reloadMcpServers())
        .catch(onError);
    });
    this.routingPolicies = new Informer<RoutingPolicy>(client, { path: agentPath('routingpolicies'), onError });
    this.routingExamples = new Informer<ConfigMap>(client, {
      path: resourcePath({ group: '', version: 'v1', plural: 'configmaps', namespace: AGENT_NAMESPACE }),
      labelSelector: `${ROUTING_EXAMPLES_LABEL}=true`,
      onError,
    });
    // The first lists are told by start(), once; resyncs change nothing.
    const routingChanged = (event: string) => {
      if (event !== 'resync' && this.started) this.reloadRoutingPolicies();
    };
    this.routingPolicies.on(routingChanged);
    this.routingExamples.on(routingChanged);
    this.guardrails = new Informer<Guardrail>(client, { path: agentPath('guardrails'), onError });
    this.guardrails.on((event) => {
      if (event !== 'resync' && this.started) this.opts.onGuardrails?.(this.guardrails.list());
    });
    this.mds = new Informer<ModelDeployment>(client, {
      path: resourcePath({
        group: API_GROUP,
        version: API_VERSION,
        plural: 'modeldeployments',
        namespace: LLMS_NAMESPACE,
      }),
      onError,
    });
    // The model servers' ready pods, to balance over them instead of the Service's virtual IP.
    this.slices = new Informer<EndpointSlice>(client, {
      path: resourcePath({
        group: 'discovery.k8s.io',
        version: 'v1',
        plural: 'endpointslices',
        namespace: LLMS_NAMESPACE,
      }),
      onError,
    });
    this.slices.on((event) => {
      if (event === 'resync') return;
      const next = replicasByService(this.slices.list());
      if (sameReplicas(this.replicas, next)) return;
      this.replicas = next;
      this.rebuildRoutes();
    });
    this.eps = new Informer<ExternalProvider>(client, {
      path: resourcePath({
        group: API_GROUP,
        version: API_VERSION,
        plural: 'externalproviders',
        namespace: AGENT_NAMESPACE,
      }),
      onError,
    });
    this.secrets = new NamedSecrets(client, AGENT_NAMESPACE, {
      onChange: (name) => {
        if (name !== this.keysSecret) return;
        if (this.secrets.access(name) === 'forbidden') {
          onError(new Error("the proxy may not read its API-key Secret: check the chart's RBAC"));
        }
        this.reloadKeys();
      },
      onError: (summary) => onError(new Error(`Secret watch failed: ${summary}`)),
    });
    this.prices = new Informer<ConfigMap>(client, {
      path: resourcePath({ group: '', version: 'v1', plural: 'configmaps', namespace: AGENT_NAMESPACE }),
      fieldSelector: `metadata.name=${PRICES_CONFIGMAP}`,
      onError,
    });
    this.prices.on(() => this.reloadPrices());
    this.keysSecret = opts.keysSecret ?? API_KEYS_SECRET;
    this.mds.on(() => this.rebuildRoutes());
    this.eps.on((event) => {
      this.rebuildRoutes();
      if (event !== 'resync') void this.secrets.track(this.secretNames());
    });
  }

  private rebuildRoutes(): void {
    this.opts.routes.set(
      buildRoutes(
        this.mds.list(),
        {
          standalone: false,
          replicasOf: (service) => this.replicas.get(service),
          ...(this.opts.slotsOf ? { slotsOf: this.opts.slotsOf } : {}),
          ...(this.opts.contextOf ? { contextOf: this.opts.contextOf } : {}),
          ...(this.opts.env ? { env: this.opts.env } : {}),
        },
        this.eps.list(),
      ),
    );
  }

  /**
   * Wakes a hibernated model: spec.replicas 0 -> 1 through the scale subresource, only if it is
   * still 0. A Scale omits replicas when they are 0, so a JSON-patch test cannot check it: read the
   * Scale, then write it back under its resourceVersion (409 if anyone, a proxy replica or the
   * autoscaler, changed it meanwhile; then read again).
   */
  async wake(namespace: string, name: string): Promise<void> {
    const path = resourcePath({
      group: API_GROUP,
      version: API_VERSION,
      plural: 'modeldeployments',
      namespace,
      name,
      subresource: 'scale',
    });
    for (let attempt = 0; attempt < 3; attempt++) {
      const scale = await this.client.get<{ metadata?: { resourceVersion?: string }; spec?: { replicas?: number } }>(
        path,
      );
      if (!scale || (scale.spec?.replicas ?? 0) > 0) return;
      try {
        await this.client.mergePatch(path, {
          metadata: { resourceVersion: scale.metadata?.resourceVersion },
          spec: { replicas: 1 },
        });
        return;
      } catch (err) {
        if (!(err instanceof KubeApiError && err.status === 409)) throw err;
      }
    }
  }

  /**
   * The API-key Secret, the access-key Secrets the providers name, the credentials the McpServers
   * name, and the key MCP sessions are sealed with.
   */
  private secretNames(): string[] {
    return [
      this.keysSecret,
      MCP_SESSIONS_SECRET,
      ...this.eps.list().flatMap((ep) => ep.spec.auth.secretRef?.name ?? []),
      ...this.mcpServers.list().flatMap((server) => server.spec.auth?.secretRef?.name ?? []),
    ];
  }

  private reloadKeys(): void {
    // Every value of the Secret holds keys (one per line, clear text or sha256:<hex>).
    const text = Object.values(this.secrets.data(this.keysSecret) ?? {})
      .map((v) => Buffer.from(v, 'base64').toString('utf8'))
      .join('\n');
    this.opts.keys.replace(ApiKeys.parse(text));
  }

  private reloadApiKeys(): void {
    const apiKeys = this.apiKeys.list();
    this.opts.keys.setManaged(
      apiKeys.flatMap((ak) => policyOf(ak) ?? []),
      apiKeys.map(keyPolicy),
    );
  }

  private reloadBudgets(): void {
    this.opts.onBudgets?.(this.budgets.list().flatMap((b) => tagBudgetOf(b) ?? []));
  }

  private reloadMcpServers(): void {
    this.opts.onMcpServers?.(this.mcpServers.list());
  }

  private reloadRoutingPolicies(): void {
    const data = (name: string) => this.routingExamples.get(`${AGENT_NAMESPACE}/${name}`)?.data;
    this.opts.onRoutingPolicies?.(this.routingPolicies.list().map((p) => withInlineExamples(p, data)));
  }

  /** The ApiKey and Budget objects as last seen (the proxy reports spend into their status). */
  apiKeyObjects(): ApiKey[] {
    return this.apiKeys.list();
  }

  budgetObjects(): Budget[] {
    return this.budgets.list();
  }

  private reloadPrices(): void {
    this.pricesListener?.(this.prices.list()[0]?.data?.[PRICES_KEY] ?? '');
  }

  /** Calls `listener` with the price overrides (YAML text, '' without the ConfigMap) now and on every change. */
  onPrices(listener: (yamlText: string) => void): void {
    this.pricesListener = listener;
    if (this.prices.hasSynced()) this.reloadPrices();
  }

  /** The ExternalProviders of the proxy's namespace now (a Guardrail's services call with theirs). */
  externalProviders(): ExternalProvider[] {
    return this.eps.list();
  }

  /** A provider's or an McpServer's Secret in the proxy's namespace, as far as the proxy may read it. */
  secret(name: string): SecretLookup {
    return this.secrets.lookup(name);
  }

  async start(): Promise<void> {
    await Promise.all([
      this.slices.start(),
      this.mds.start(),
      this.eps.start(),
      this.prices.start(),
      this.apiKeys.start(),
      this.budgets.start(),
      this.identityProviders.start(),
      this.mcpServers.start(),
      this.routingPolicies.start(),
      this.routingExamples.start(),
      this.guardrails.start(),
    ]);
    this.started = true;
    await this.secrets.track(this.secretNames());
    this.reloadPrices();
    this.rebuildRoutes();
    this.reloadKeys();
    this.reloadApiKeys();
    this.reloadBudgets();
    this.opts.keys.identities?.set(this.identityProviders.list());
    this.reloadMcpServers();
    this.reloadRoutingPolicies();
    this.opts.onGuardrails?.(this.guardrails.list());
  }

  ready(): boolean {
    return (
      this.mds.hasSynced() &&
      this.slices.hasSynced() &&
      this.eps.hasSynced() &&
      this.secrets.settled() &&
      this.prices.hasSynced() &&
      this.apiKeys.hasSynced() &&
      this.budgets.hasSynced() &&
      this.identityProviders.hasSynced() &&
      this.mcpServers.hasSynced() &&
      this.routingPolicies.hasSynced() &&
      this.routingExamples.hasSynced() &&
      this.guardrails.hasSynced()
    );
  }

  async stop(): Promise<void> {
    await Promise.all([
      this.slices.stop(),
      this.mds.stop(),
      this.eps.stop(),
      this.prices.stop(),
      this.apiKeys.stop(),
      this.budgets.stop(),
      this.identityProviders.stop(),
      this.mcpServers.stop(),
      this.routingPolicies.stop(),
      this.routingExamples.stop(),
      this.guardrails.stop(),
    ]);
    await this.secrets.stop();
  }
}

function sameReplicas(a: Map<string, string[]>, b: Map<string, string[]>): boolean {
  if (a.size !== b.size) return false;
  for (const [k, v] of a) {
    const w = b.get(k);
    if (!w || w.length !== v.length || v.some((x, i) => x !== w[i])) return false;
  }
  return true;
}
