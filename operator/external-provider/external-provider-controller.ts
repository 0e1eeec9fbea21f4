import { type BedrockPriceTable, loadBedrockPrices } from '../../crds/catalog/prices.js';
import { AGENT_NAMESPACE, API_GROUP, PRICES_CONFIGMAP } from '../../crds/constants.js';
import type { ExternalProvider, ExternalProviderStatus } from '../../crds/external-provider.js';
import { type Informer, keyOf } from '../../crds/kube/informer.js';
import type { KubeClient } from '../../crds/kube/kube-client.js';
import { NamedSecrets, SECRET_READ_WAIT_MS } from '../../crds/kube/named-secrets.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { namesMayChange, resolveNames } from '../../crds/model-names.js';
import type { CredentialProvider } from '../../crds/providers/aws-credentials.js';
import { ProviderCredentials } from '../../crds/providers/credentials.js';
import type { FetchJson } from '../../crds/providers/provider.js';
import { aliasCondition, aliasConflictEvent, withAliasCondition } from '../aliases/alias-condition.js';
import { type Naming, retiringCondition, retiringEvent, withRetiringCondition } from '../lifecycle/models-retiring.js';
import { platformCollection } from '../runtime/collection.js';
import { type ControllerDeclaration, everyKeyOf, watch } from '../runtime/controller-declaration.js';
import type { EventRecorder } from '../runtime/events.js';
import { priceTableIn } from '../runtime/price-table.js';
import { writeStatusIfChanged } from '../runtime/status-write.js';
import type { ReconcileResult } from '../runtime/work-queue.js';
import { discover, isTransient, providerStatus } from './provider-status.js';

/**
 * Reconciles an ExternalProvider: discovers what its credentials may call through its provider's
 * module (provider-status.ts: one path for every provider, Bedrock's foundation models and
 * inference profiles included), and records what is available and which selected models the
 * price table (shipped, with the prices ConfigMap over it) does not price. Discovery runs on a
 * spec or Secret change and then every `rediscoveryMs`; reconciles in between (our own status
 * write, a resync) reuse the last result, so a status write never triggers another discovery.
 */

interface ExternalProviderControllerOptions {
  /** AWS: the operator's own identity roles are assumed with; the SDK's default chain where absent. */
  awsBase?: CredentialProvider;
  rediscoveryMs: number;
  now: () => Date;
  /** The ModelDeployments as cached, whose models and aliases a provider's aliases may clash with. */
  deployments?: () => readonly ModelDeployment[];
  /** Where providers' endpoint overrides and workload-identity settings are read; process.env by default. */
  env?: NodeJS.ProcessEnv;
  /** Discovery's HTTP (tests count calls); the platform's fetch by default. */
  fetch?: FetchJson;
}

interface LastDiscovery {
  generation: number;
  secretVersion: string;
  at: number;
  /** A transient failure: discover again this soon, not after rediscoveryMs. */
  retryMs?: number;
}

/** How soon a provider's discovery that failed for a moment is tried again. */
const TRANSIENT_RETRY_MS = 30_000;

export class ExternalProviderController {
  private readonly last = new Map<string, LastDiscovery>();
  private readonly basePrices = loadBedrockPrices();
  private readonly credentials: ProviderCredentials;

  constructor(
    private readonly client: KubeClient,
    private readonly providers: Informer<ExternalProvider>,
    private readonly secrets: NamedSecrets,
    private readonly events: EventRecorder,
    private readonly opts: ExternalProviderControllerOptions,
  ) {
    this.credentials = new ProviderCredentials((name) => this.secrets.lookup(name), {
      env: opts.env ?? process.env,
      ...(opts.awsBase ? { awsBase: opts.awsBase } : {}),
    });
  }

  /** Changes when the Secret changes or when this operator gains or loses the right to read it. */
  private secretVersion(ep: ExternalProvider): string {
    const name = ep.spec.auth.secretRef?.name;
    if (!name) return '';
    return `${this.secrets.access(name) ?? 'untracked'}/${this.secrets.get(name)?.metadata?.resourceVersion ?? ''}`;
  }

  /** The shipped price table with the prices ConfigMap over it, as the proxies price with. */
  private prices(): Promise<BedrockPriceTable> {
    return priceTableIn(this.client, this.basePrices);
  }

  /**
   * Writes `status` with the provider's AliasesAccepted and ModelsRetiring conditions, and the
   * Events when its aliases start to clash or it starts to name a retiring model.
   */
  private async writeStatus(ep: ExternalProvider, status: ExternalProviderStatus): Promise<ExternalProviderStatus> {
    const now = this.opts.now();
    const deployments = this.opts.deployments?.() ?? [];
    const providers = this.providers.list();
    const aliases = aliasCondition(ep, resolveNames(deployments, providers));
    const world = { deployments, providers, prices: await this.prices() };
    const retiring = retiringCondition(namings(ep), world, now, ep.metadata.generation ?? 0);
    const conditions = withRetiringCondition(withAliasCondition(status.conditions, aliases, now), retiring, now);
    const next = conditions ? { ...status, conditions } : status;
    await writeStatusIfChanged(this.client, 'externalproviders', ep, next);
    const clash = aliasConflictEvent(ep.status?.conditions, aliases);
    if (clash) await this.events.record(ep, 'Warning', clash.reason, clash.message);
    const going = retiringEvent(ep.status?.conditions, retiring);
    if (going) await this.events.record(ep, 'Warning', going.reason, going.message);
    return next;
  }

  async reconcile(key: string): Promise<ReconcileResult> {
    const ep = this.providers.get(key);
    if (!ep || ep.metadata.deletionTimestamp) {
      this.last.delete(key);
      return;
    }
    // Discovering before the Secret's first read would report it missing, with a Warning Event.
    if (this.secrets.unread(ep.spec.auth.secretRef?.name)) return { requeueAfterMs: SECRET_READ_WAIT_MS };
    const generation = ep.metadata.generation ?? 0;
    const secretVersion = this.secretVersion(ep);
    const now = this.opts.now().getTime();
    const last = this.last.get(key);
    const due =
      !last ||
      last.generation !== generation ||
      last.secretVersion !== secretVersion ||
      now - last.at >= (last.retryMs ?? this.opts.rediscoveryMs) ||
      ep.status?.observedGeneration !== generation;
    if (!due) {
      // Between discoveries only the aliases can change (another resource claimed or freed one).
      await this.writeStatus(ep, ep.status ?? {});
      return { requeueAfterMs: Math.max(1000, (last.retryMs ?? this.opts.rediscoveryMs) - (now - last.at)) };
    }

    let retryMs: number | undefined;
    const outcome = await discover(ep, this.credentials, this.opts.env ?? process.env, this.opts.fetch);
    if (!outcome.ok && isTransient(outcome.problem)) retryMs = Math.min(TRANSIENT_RETRY_MS, this.opts.rediscoveryMs);
    const next = providerStatus(ep, outcome, this.opts.now(), await this.prices());
    this.last.set(key, { generation, secretVersion, at: now, ...(retryMs ? { retryMs } : {}) });
    const status = await this.writeStatus(ep, next);
    if (status.phase !== ep.status?.phase) {
      const ready = status.conditions?.find((c) => c.type === 'Ready');
      await this.events.record(
        ep,
        status.phase === 'Ready' ? 'Normal' : 'Warning',
        status.phase === 'Ready' ? 'Ready' : (ready?.reason ?? status.phase ?? 'Failed'),
        ready?.message ?? '',
      );
    }
    return { requeueAfterMs: retryMs ?? this.opts.rediscoveryMs };
  }
}

/** The models a provider names: those it selects, its aliases and its fallbacks. */
const namings = (ep: ExternalProvider): Naming[] => [
  ...ep.spec.models.map((name) => ({ name, field: 'spec.models' })),
  ...(ep.spec.aliases ?? []).map((a) => ({ name: a.name, field: 'spec.aliases' })),
  ...(ep.spec.fallback ?? []).map((name) => ({ name, field: 'spec.fallback' })),
];

const EXTERNAL_PROVIDERS = platformCollection<ExternalProvider>('externalproviders', AGENT_NAMESPACE);
const MODEL_DEPLOYMENTS = platformCollection<ModelDeployment>('modeldeployments');

/**
 * The ExternalProvider controller. Its watches requeue: a provider itself; every provider when
 * a ModelDeployment's model or aliases change, which may free or take a provider's alias; and,
 * watched by the controller itself once the providers are listed, the providers naming a Secret
 * that changed: each Secret providers name is watched by name (RBAC grants exactly those).
 */
export const externalProviderController: ControllerDeclaration = {
  name: 'externalprovider',
  for: EXTERNAL_PROVIDERS,
  watches: [watch(MODEL_DEPLOYMENTS, everyKeyOf(EXTERNAL_PROVIDERS, namesMayChange))],
  rbac: [
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [API_GROUP],
      resources: ['externalproviders/status'],
      verbs: ['get', 'patch', 'update'],
      reason: 'status written by merge patch when it changed',
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [''],
      resources: ['secrets'],
      verbs: ['get', 'list', 'watch'],
      resourceNamesFromValue: 'providerSecrets',
      reason: "the providers' credential Secrets, each watched by name: only those the install lists",
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [''],
      resources: ['configmaps'],
      verbs: ['get'],
      resourceNames: [PRICES_CONFIGMAP],
      reason: 'the price overrides, read at discovery (which selected models have no price)',
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [''],
      resources: ['events'],
      verbs: ['create', 'patch'],
      reason: 'Events on ExternalProviders',
    },
  ],
  failure: 'provider reconcile failed',
  async start(ctx) {
    const providers = ctx.caches.of(EXTERNAL_PROVIDERS);
    const deployments = ctx.caches.of(MODEL_DEPLOYMENTS);
    const secrets = new NamedSecrets(ctx.client, AGENT_NAMESPACE, {
      onChange: (name) => {
        for (const ep of providers.list()) if (ep.spec.auth.secretRef?.name === name) ctx.enqueue(keyOf(ep));
      },
      onError: (error) => ctx.log.warn('Secret watch failed, retrying', { error }),
    });
    const track = () => secrets.track(providers.list().flatMap((ep) => ep.spec.auth.secretRef?.name ?? []));
    providers.on((event) => {
      if (event !== 'resync') void track();
    });
    // The first discoveries see the Secrets as they are, not as not yet read.
    await track();
    const opts = ctx.options;
    const controller = new ExternalProviderController(ctx.client, providers, secrets, ctx.events, {
      ...(opts.aws?.base ? { awsBase: opts.aws.base } : {}),
      rediscoveryMs: opts.rediscoveryMs ?? 10 * 60_000,
      ...(opts.providerEnv ? { env: opts.providerEnv } : {}),
      deployments: () => deployments.list(),
      now: ctx.now,
    });
    return { reconcile: (key) => controller.reconcile(key), watches: secrets };
  },
};
