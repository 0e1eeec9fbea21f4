import type { KubeConfig } from '@kubernetes/client-node';
import { AGENT_NAMESPACE, API_GROUP, API_VERSION, LLMS_NAMESPACE } from '../crds/constants.js';
import type { ExternalProvider } from '../crds/external-provider.js';
import { Informer } from '../crds/informer.js';
import { KubeClient, resourcePath } from '../crds/kube-client.js';
import type { ModelDeployment } from '../crds/model-deployment.js';
import { ApiKeys } from './auth.js';
import { buildRoutes, type RouteTable } from './routing.js';

/**
 * The proxy's view of a cluster: ModelDeployments and ExternalProviders (routes) and the
 * Secrets of its namespace (API keys, providers' access keys), each watched through an
 * informer; every change rebuilds the routing table or the key set.
 */

export const API_KEYS_SECRET = 'platform-ai-optimizer-api-keys';
/** ConfigMap whose `bedrock-prices.yaml` overrides the shipped Bedrock price table. */
export const PRICES_CONFIGMAP = 'platform-ai-optimizer-prices';
export const PRICES_KEY = 'bedrock-prices.yaml';

interface ConfigMap {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string };
  data?: Record<string, string>;
}

export interface Secret {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string };
  data?: Record<string, string>;
}

export interface ClusterSourceOptions {
  kubeConfig: KubeConfig;
  routes: RouteTable;
  keys: ApiKeys;
  keysSecret?: string;
  onError?: (err: unknown) => void;
}

export class ClusterSource {
  private readonly mds: Informer<ModelDeployment>;
  private readonly eps: Informer<ExternalProvider>;
  private readonly secrets: Informer<Secret>;
  private readonly prices: Informer<ConfigMap>;
  private readonly keysSecret: string;
  private pricesListener: ((yamlText: string) => void) | undefined;

  constructor(private readonly opts: ClusterSourceOptions) {
    const client = new KubeClient(opts.kubeConfig, { userAgent: 'platform-ai-optimizer-proxy' });
    const onError = opts.onError ?? (() => {});
    this.mds = new Informer<ModelDeployment>(client, {
      path: resourcePath({
        group: API_GROUP,
        version: API_VERSION,
        plural: 'modeldeployments',
        namespace: LLMS_NAMESPACE,
      }),
      onError,
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
    // The proxy's own namespace: the API-key Secret and the access-key Secrets of providers.
    this.secrets = new Informer<Secret>(client, {
      path: resourcePath({ group: '', version: 'v1', plural: 'secrets', namespace: AGENT_NAMESPACE }),
      onError,
    });
    this.prices = new Informer<ConfigMap>(client, {
      path: resourcePath({ group: '', version: 'v1', plural: 'configmaps', namespace: AGENT_NAMESPACE }),
      fieldSelector: `metadata.name=${PRICES_CONFIGMAP}`,
      onError,
    });
    this.prices.on(() => this.reloadPrices());
    this.keysSecret = opts.keysSecret ?? API_KEYS_SECRET;
    this.mds.on(() => this.rebuildRoutes());
    this.eps.on(() => this.rebuildRoutes());
    this.secrets.on((_e, secret) => {
      if (secret.metadata?.name === this.keysSecret) this.reloadKeys();
    });
  }

  private rebuildRoutes(): void {
    this.opts.routes.set(buildRoutes(this.mds.list(), { standalone: false }, this.eps.list()));
  }

  private reloadKeys(): void {
    // Every value of the Secret holds keys (one per line, clear text or sha256:<hex>).
    const text = [this.secrets.get(`${AGENT_NAMESPACE}/${this.keysSecret}`)]
      .flatMap((s) => Object.values(s?.data ?? {}))
      .map((v) => Buffer.from(v, 'base64').toString('utf8'))
      .join('\n');
    this.opts.keys.replace(ApiKeys.parse(text));
  }

  private reloadPrices(): void {
    this.pricesListener?.(this.prices.list()[0]?.data?.[PRICES_KEY] ?? '');
  }

  /** Calls `listener` with the price overrides (YAML text, '' without the ConfigMap) now and on every change. */
  onPrices(listener: (yamlText: string) => void): void {
    this.pricesListener = listener;
    if (this.prices.hasSynced()) this.reloadPrices();
  }

  /** Data of a Secret in the proxy's namespace (an access-key provider's keys). */
  secretData(name: string): Record<string, string> | undefined {
    return this.secrets.get(`${AGENT_NAMESPACE}/${name}`)?.data;
  }

  async start(): Promise<void> {
    await Promise.all([this.mds.start(), this.eps.start(), this.secrets.start(), this.prices.start()]);
    this.reloadPrices();
    this.rebuildRoutes();
    this.reloadKeys();
  }

  ready(): boolean {
    return this.mds.hasSynced() && this.eps.hasSynced() && this.secrets.hasSynced() && this.prices.hasSynced();
  }

  async stop(): Promise<void> {
    await Promise.all([this.mds.stop(), this.eps.stop(), this.secrets.stop(), this.prices.stop()]);
  }
}
