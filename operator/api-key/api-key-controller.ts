import { createHash, randomBytes } from 'node:crypto';
import type { ApiKey } from '../../crds/api-key.js';
import { type BedrockPriceTable, loadBedrockPrices } from '../../crds/catalog/prices.js';
import {
  AGENT_NAMESPACE,
  API_GROUP,
  API_GROUP_VERSION,
  API_KEY_SECRET_KEY,
  apiKeySecretName,
  MANAGED_BY_LABEL,
  MANAGED_BY_VALUE,
  PRICES_CONFIGMAP,
} from '../../crds/constants.js';
import type { ExternalProvider } from '../../crds/external-provider.js';
import type { Informer, InformerEvent } from '../../crds/kube/informer.js';
import type { KubeClient } from '../../crds/kube/kube-client.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { namesMayChange } from '../../crds/model-names.js';
import {
  MODELS_RETIRING,
  retiringCondition,
  retiringEvent,
  withRetiringCondition,
} from '../lifecycle/models-retiring.js';
import { platformCollection } from '../runtime/collection.js';
import { findCondition } from '../runtime/conditions.js';
import { type ControllerDeclaration, everyKeyOf, watch } from '../runtime/controller-declaration.js';
import type { EventRecorder } from '../runtime/events.js';
import { priceTableIn } from '../runtime/price-table.js';
import { writeStatusIfChanged } from '../runtime/status-write.js';
import type { ReconcileResult } from '../runtime/work-queue.js';
import { apiKeyPlan } from './api-key-status.js';

/**
 * Reconciles an ApiKey: issues its key into the Secret apikey-<name> (owned by the ApiKey, so
 * it goes with it) when there is none or spec.rotation changed, publishes the digest, and keeps
 * the conditions. The operator may create and delete Secrets in its namespace but not read
 * them (create and delete answer without the data): issuing is delete-then-create, so a key
 * issued but never published (a crash between the two writes) is simply issued again.
 */

/** A new key: `sk-` and 256 random bits, base64url. */
export function generateKey(): string {
  return `sk-${randomBytes(32).toString('base64url')}`;
}

export const keyDigest = (key: string): string => `sha256:${createHash('sha256').update(key, 'utf8').digest('hex')}`;
export const keyHint = (key: string): string => `${key.slice(0, 7)}...${key.slice(-4)}`;

interface ApiKeyControllerOptions {
  now: () => Date;
}

class ApiKeyController {
  private readonly shippedPrices: BedrockPriceTable = loadBedrockPrices();

  constructor(
    private readonly client: KubeClient,
    private readonly keys: Informer<ApiKey>,
    private readonly providers: Informer<ExternalProvider>,
    private readonly deployments: Informer<ModelDeployment>,
    private readonly events: EventRecorder,
    private readonly opts: ApiKeyControllerOptions,
  ) {}

  private prices?: { at: number; table: Promise<BedrockPriceTable> };

  /** The price table, read at most once a minute: a resync reconciles every key at once. */
  private priceTable(now: Date): Promise<BedrockPriceTable> {
    if (!this.prices || now.getTime() - this.prices.at > PRICES_FRESH_MS) {
      this.prices = { at: now.getTime(), table: priceTableIn(this.client, this.shippedPrices) };
    }
    return this.prices.table;
  }

  /**
   * ModelsRetiring for the key's allow-list (spec.models): its names resolved among the providers'
   * models and the cluster's aliases; a ModelDeployment's model never retires on a provider's schedule.
   */
  private async retiring(ak: ApiKey, now: Date) {
    const allowed = ak.spec.models ?? [];
    if (allowed.length === 0) return undefined;
    const world = {
      deployments: this.deployments.list(),
      providers: this.providers.list(),
      prices: await this.priceTable(now),
    };
    const namings = allowed.map((name) => ({ name, field: 'spec.models' }));
    return retiringCondition(namings, world, now, ak.metadata.generation ?? 0);
  }

  private async issue(ak: ApiKey): Promise<string> {
    const name = apiKeySecretName(ak.metadata.name ?? '');
    const secrets = `/api/v1/namespaces/${AGENT_NAMESPACE}/secrets`;
    await this.client.delete(`${secrets}/${name}`);
    const key = generateKey();
    await this.client.create(secrets, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: {
        name,
        namespace: AGENT_NAMESPACE,
        labels: { [MANAGED_BY_LABEL]: MANAGED_BY_VALUE },
        ownerReferences: [
          {
            apiVersion: API_GROUP_VERSION,
            kind: 'ApiKey',
            name: ak.metadata.name,
            uid: ak.metadata.uid,
            controller: true,
          },
        ],
      },
      type: 'Opaque',
      data: { [API_KEY_SECRET_KEY]: Buffer.from(key, 'utf8').toString('base64') },
    });
    return key;
  }

  async reconcile(key: string): Promise<ReconcileResult> {
    const ak = this.keys.get(key);
    if (!ak || ak.metadata.deletionTimestamp) return;
    const now = this.opts.now();
    const plan = apiKeyPlan(ak, now);
    const status = plan.status;
    const conditions = withRetiringCondition(status.conditions, await this.retiring(ak, now), now);
    if (conditions) status.conditions = conditions;
    if (plan.issue) {
      const issued = await this.issue(ak);
      status.digest = keyDigest(issued);
      status.keyHint = keyHint(issued);
    }
    await writeStatusIfChanged(this.client, 'apikeys', ak, status, ['usage']);
    if (plan.issue) {
      await this.events.record(
        ak,
        'Normal',
        ak.status?.digest ? 'KeyRotated' : 'KeyIssued',
        `a new key ${status.keyHint} is in the Secret apikey-${ak.metadata.name}${ak.status?.digest ? '; the previous key no longer works' : ''}`,
      );
    }
    const retiring = retiringEvent(ak.status?.conditions, findCondition(status.conditions, MODELS_RETIRING));
    if (retiring) await this.events.record(ak, 'Warning', retiring.reason, retiring.message);
    for (const type of ['Expired', 'BudgetExhausted'] as const) {
      const next = findCondition(status.conditions, type);
      const before = findCondition(ak.status?.conditions, type);
      if (next?.status === 'True' && before?.status !== 'True') {
        await this.events.record(ak, 'Warning', next.reason, next.message);
      }
    }
    return plan.requeueAfterMs !== undefined ? { requeueAfterMs: plan.requeueAfterMs } : undefined;
  }
}

const API_KEYS = platformCollection<ApiKey>('apikeys', AGENT_NAMESPACE);
/** The same collections the ExternalProvider controller reads, so their informers are shared. */
const EXTERNAL_PROVIDERS = platformCollection<ExternalProvider>('externalproviders', AGENT_NAMESPACE);
const MODEL_DEPLOYMENTS = platformCollection<ModelDeployment>('modeldeployments');
const PRICES_FRESH_MS = 60_000;

/** A provider's models may have changed: the keys' allow-lists are read against them again. */
const modelsMayChange = (event: InformerEvent, ep: ExternalProvider, old?: ExternalProvider) =>
  event !== 'resync' && (event !== 'update' || !old || JSON.stringify(old.spec) !== JSON.stringify(ep.spec));

/** The ApiKey controller: each ApiKey is its own key; the Secrets it issues are written, never read. */
export const apiKeyController: ControllerDeclaration = {
  name: 'apikey',
  for: API_KEYS,
  watches: [
    watch(EXTERNAL_PROVIDERS, everyKeyOf(API_KEYS, modelsMayChange)),
    watch(MODEL_DEPLOYMENTS, everyKeyOf(API_KEYS, namesMayChange)),
  ],
  rbac: [
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [API_GROUP],
      resources: ['apikeys/status'],
      verbs: ['get', 'patch', 'update'],
      reason: 'status (digest, hint, conditions) written by merge patch when it changed',
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [''],
      resources: ['secrets'],
      verbs: ['create', 'delete'],
      reason: 'issues apikey-<name> by delete-then-create, both answering without the data: no Secret is read',
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [''],
      resources: ['configmaps'],
      verbs: ['get'],
      resourceNames: [PRICES_CONFIGMAP],
      reason: 'the lifecycle dates beside the price overrides (which allowed models retire soon)',
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [''],
      resources: ['events'],
      verbs: ['create', 'patch'],
      reason: 'Events on ApiKeys',
    },
  ],
  failure: 'key reconcile failed',
  async start(ctx) {
    const controller = new ApiKeyController(
      ctx.client,
      ctx.caches.of(API_KEYS),
      ctx.caches.of(EXTERNAL_PROVIDERS),
      ctx.caches.of(MODEL_DEPLOYMENTS),
      ctx.events,
      { now: ctx.now },
    );
    return { reconcile: (key) => controller.reconcile(key) };
  },
};
