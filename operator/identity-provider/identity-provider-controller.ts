import type { ApiKey } from '../../crds/api-key.js';
import { AGENT_NAMESPACE, API_GROUP } from '../../crds/constants.js';
import { type ClusterIssuerApi, clusterIssuerApi } from '../../crds/identity/cluster-issuer.js';
import { discoveryUrl, getJson } from '../../crds/identity/get-json.js';
import type { IdentityProvider } from '../../crds/identity-provider.js';
import type { Informer } from '../../crds/kube/informer.js';
import type { KubeClient } from '../../crds/kube/kube-client.js';
import type { CommonStatus } from '../../crds/meta.js';
import { platformCollection } from '../runtime/collection.js';
import { setCondition } from '../runtime/conditions.js';
import { type ControllerDeclaration, everyKeyOf, watch } from '../runtime/controller-declaration.js';
import { writeStatusIfChanged } from '../runtime/status-write.js';
import type { ReconcileResult } from '../runtime/work-queue.js';
import {
  type IssuerCheck,
  type LastCheck,
  missingProfiles,
  readyCondition,
  recheckIn,
} from './identity-provider-status.js';

/**
 * Reconciles an IdentityProvider: reads its issuer's discovery document and signing keys (as the
 * proxies will) and checks that the ApiKeys its profiles name exist, into the Ready condition.
 * The issuer is read again every 10 minutes (30 s after a failure), since it can fail without any
 * object changing, and when the spec changes; a resync, an ApiKey added or removed, or its own
 * status write reuse the last reading instead of fetching the issuer again.
 */
class IdentityProviderController {
  private readonly cluster: ClusterIssuerApi;
  private readonly last = new Map<string, LastCheck>();

  constructor(
    private readonly client: KubeClient,
    private readonly providers: Informer<IdentityProvider>,
    private readonly apiKeys: Informer<ApiKey>,
    private readonly opts: { now: () => Date; getJson: (url: string) => Promise<unknown> },
  ) {
    this.cluster = clusterIssuerApi(client);
  }

  async reconcile(key: string): Promise<ReconcileResult> {
    const ip = this.providers.get(key);
    if (!ip || ip.metadata.deletionTimestamp) {
      this.last.delete(key);
      return;
    }
    const generation = ip.metadata.generation ?? 0;
    let last = this.last.get(key);
    if (!last || recheckIn(last, generation, this.opts.now().getTime()) === 0) {
      last = { generation, at: this.opts.now().getTime(), check: await this.check(ip) };
      this.last.set(key, last);
    }
    const names = new Set(this.apiKeys.list().map((k) => k.metadata.name ?? ''));
    const ready = readyCondition(ip, last.check, missingProfiles(ip, names), generation);
    const status: CommonStatus = {
      observedGeneration: generation,
      conditions: setCondition(ip.status?.conditions, ready, this.opts.now()),
    };
    await writeStatusIfChanged(this.client, 'identityproviders', ip, status);
    return { requeueAfterMs: Math.max(1000, recheckIn(last, generation, this.opts.now().getTime())) };
  }

  private async check(ip: IdentityProvider): Promise<IssuerCheck> {
    const discovery = ip.spec.kubernetes
      ? () => this.cluster.discovery()
      : () => this.opts.getJson(discoveryUrl(ip.spec.issuer ?? ''));
    let jwksUri = ip.spec.jwksUri;
    if (ip.spec.kubernetes || !jwksUri) {
      try {
        const doc = (await discovery()) as { jwks_uri?: unknown } | undefined;
        if (typeof doc?.jwks_uri !== 'string') throw new Error('no jwks_uri');
        jwksUri ??= doc.jwks_uri;
      } catch (err) {
        return { failed: 'Discovery', error: (err as Error).message };
      }
    }
    try {
      // The cluster's keys come from the API server itself, as the proxies read them.
      const jwks = (await (ip.spec.kubernetes ? this.cluster.jwks() : this.opts.getJson(jwksUri ?? ''))) as
        | { keys?: unknown }
        | undefined;
      return { keys: Array.isArray(jwks?.keys) ? jwks.keys.length : 0 };
    } catch (err) {
      return { failed: 'Keys', error: (err as Error).message };
    }
  }
}

const IDENTITY_PROVIDERS = platformCollection<IdentityProvider>('identityproviders', AGENT_NAMESPACE);
/** The same collection the ApiKey controller reads, so the informer is shared. */
const API_KEYS = platformCollection<ApiKey>('apikeys', AGENT_NAMESPACE);

/** An ApiKey created or deleted may be a profile an IdentityProvider names. */
const keySetChanged = (event: string) => event === 'add' || event === 'delete';

export const identityProviderController: ControllerDeclaration = {
  name: 'identityprovider',
  for: IDENTITY_PROVIDERS,
  watches: [watch(API_KEYS, everyKeyOf(IDENTITY_PROVIDERS, keySetChanged))],
  rbac: [
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [API_GROUP],
      resources: ['identityproviders/status'],
      verbs: ['get', 'patch', 'update'],
      reason: 'the Ready condition, written by merge patch when it changed',
    },
  ],
  failure: 'identity provider reconcile failed',
  async start(ctx) {
    const controller = new IdentityProviderController(
      ctx.client,
      ctx.caches.of(IDENTITY_PROVIDERS),
      ctx.caches.of(API_KEYS),
      { now: ctx.now, getJson },
    );
    return { reconcile: (key) => controller.reconcile(key) };
  },
};
