import {
  BedrockClient,
  type InferenceProfileSummary,
  type InferenceProfileType,
  ListFoundationModelsCommand,
  ListInferenceProfilesCommand,
} from '@aws-sdk/client-bedrock';
import { type BedrockPriceTable, loadBedrockPrices, mergePrices, parseBedrockPrices } from '../crds/catalog/prices.js';
import { AGENT_NAMESPACE, PRICES_CONFIGMAP, PRICES_KEY } from '../crds/constants.js';
import type { ExternalProvider, ExternalProviderStatus } from '../crds/external-provider.js';
import { type Informer, keyOf } from '../crds/kube/informer.js';
import type { KubeClient } from '../crds/kube/kube-client.js';
import { NamedSecrets, type NamedSecretsOptions, type SecretObject } from '../crds/kube/named-secrets.js';
import type { ModelDeployment } from '../crds/model-deployment.js';
import { namesMayChange, resolveNames } from '../crds/model-names.js';
import {
  type AwsEndpoints,
  accessKeyFromSecretData,
  last4,
  providerCredentials,
  type RoleCredentials,
} from '../crds/providers/aws-credentials.js';
import { awsFailure } from '../crds/providers/aws-errors.js';
import { HostedCredentials } from '../crds/providers/credentials.js';
import type { FetchJson } from '../crds/providers/provider.js';
import { isHosted } from '../crds/providers/table.js';
import { aliasCondition, aliasConflictEvent, withAliasCondition } from './alias-condition.js';
import type { EventRecorder } from './events.js';
import { type DiscoveryOutcome, discoveredModels, externalProviderStatus } from './external-provider-status.js';
import { discoverHosted, hostedProviderStatus, isTransient } from './hosted-provider-status.js';
import { writeStatusIfChanged } from './status-write.js';
import type { Enqueue, ReconcileResult } from './work-queue.js';

/**
 * Reconciles an ExternalProvider: resolves its credentials, lists the region's foundation
 * models and inference profiles, and records what is available and which selected models the
 * price table (shipped, with the prices ConfigMap over it) does not price. Discovery runs on a spec or Secret change and then
 * every `rediscoveryMs`; reconciles in between (our own status write, a resync) reuse the
 * last result, so a status write never triggers another discovery.
 */

/**
 * What the ExternalProvider controller watches and the providers each event requeues: a
 * provider itself; the Secrets providers name, each watched by name (RBAC grants exactly
 * those), a change requeueing the providers that name it; and ModelDeployments whose model or
 * aliases change, which may free or take a provider's alias (every provider). Returns the
 * Secret watches, and `track` to call once the providers are listed.
 */
export function watchExternalProviders(
  client: KubeClient,
  sources: { providers: Informer<ExternalProvider>; modelDeployments: Informer<ModelDeployment> },
  enqueue: Enqueue,
  onError: NamedSecretsOptions['onError'],
): { secrets: NamedSecrets; track: () => Promise<void> } {
  const { providers } = sources;
  const secrets = new NamedSecrets(client, AGENT_NAMESPACE, {
    onChange: (name) => {
      for (const ep of providers.list()) if (ep.spec.auth.secretRef?.name === name) enqueue(keyOf(ep));
    },
    ...(onError ? { onError } : {}),
  });
  const track = () => secrets.track(providers.list().flatMap((ep) => ep.spec.auth.secretRef?.name ?? []));
  providers.on((event, ep) => {
    enqueue(keyOf(ep));
    if (event !== 'resync') void track();
  });
  sources.modelDeployments.on((event, md, old) => {
    if (namesMayChange(event, md, old)) for (const ep of providers.list()) enqueue(keyOf(ep));
  });
  return { secrets, track };
}

export interface ExternalProviderControllerOptions {
  roles: RoleCredentials;
  endpoints?: AwsEndpoints;
  rediscoveryMs: number;
  now: () => Date;
  /** The ModelDeployments as cached, whose models and aliases a provider's aliases may clash with. */
  deployments?: () => readonly ModelDeployment[];
  /** Where hosted providers' endpoint overrides and workload-identity settings are read; process.env by default. */
  env?: NodeJS.ProcessEnv;
  /** Discovery's HTTP for hosted providers (tests count calls); the platform's fetch by default. */
  fetch?: FetchJson;
}

interface LastDiscovery {
  generation: number;
  secretVersion: string;
  at: number;
  /** A transient failure: discover again this soon, not after rediscoveryMs. */
  retryMs?: number;
}

/** How soon a hosted provider's discovery that failed for a moment is tried again. */
const TRANSIENT_RETRY_MS = 30_000;

export class ExternalProviderController {
  private readonly last = new Map<string, LastDiscovery>();
  private readonly basePrices = loadBedrockPrices();
  private readonly hosted: HostedCredentials;

  constructor(
    private readonly client: KubeClient,
    private readonly providers: Informer<ExternalProvider>,
    private readonly secrets: NamedSecrets,
    private readonly events: EventRecorder,
    private readonly opts: ExternalProviderControllerOptions,
  ) {
    this.hosted = new HostedCredentials((name) => this.secrets.lookup(name), { env: opts.env ?? process.env });
  }

  private secretOf(ep: ExternalProvider): SecretObject | undefined {
    const name = ep.spec.auth.secretRef?.name;
    return name ? this.secrets.get(name) : undefined;
  }

  /** Changes when the Secret changes or when this operator gains or loses the right to read it. */
  private secretVersion(ep: ExternalProvider): string {
    const name = ep.spec.auth.secretRef?.name;
    if (!name) return '';
    return `${this.secrets.access(name) ?? 'untracked'}/${this.secrets.get(name)?.metadata?.resourceVersion ?? ''}`;
  }

  private async discover(ep: ExternalProvider): Promise<DiscoveryOutcome> {
    const secret = this.secretOf(ep);
    const key = ep.spec.auth.method === 'AccessKey' ? accessKeyFromSecretData(secret?.data) : undefined;
    const keyLast4 = key ? { accessKeyLast4: last4(key.accessKeyId) } : {};
    const region = ep.spec.region ?? '';
    const credentials = providerCredentials(ep.spec.auth, region, this.opts.roles, () =>
      this.secrets.lookup(ep.spec.auth.secretRef?.name ?? ''),
    );
    try {
      await credentials();
    } catch (err) {
      return { ok: false, stage: 'credentials', failure: awsFailure(err), ...keyLast4 };
    }
    const bedrock = new BedrockClient({
      region,
      credentials,
      maxAttempts: 2,
      ...(this.opts.endpoints?.bedrock ? { endpoint: this.opts.endpoints.bedrock } : {}),
    });
    try {
      // Text and embedding models: no modality filter, the summaries say which is which.
      const out = await bedrock.send(new ListFoundationModelsCommand({}));
      const profiles = await this.profiles(bedrock);
      return {
        ok: true,
        models: discoveredModels(out.modelSummaries ?? [], profiles, region),
        ...(profiles ? {} : { profilesGuessed: true as const }),
        ...keyLast4,
      };
    } catch (err) {
      return { ok: false, stage: 'discovery', failure: awsFailure(err), ...keyLast4 };
    } finally {
      bedrock.destroy();
    }
  }

  /**
   * System-defined and application inference profiles, every page; undefined when IAM denies
   * ListInferenceProfiles (a policy written before the gateway needed it): discovery then
   * derives the region's geographic ids instead of failing the provider.
   */
  private async profiles(bedrock: BedrockClient): Promise<InferenceProfileSummary[] | undefined> {
    const all: InferenceProfileSummary[] = [];
    for (const typeEquals of ['SYSTEM_DEFINED', 'APPLICATION'] satisfies InferenceProfileType[]) {
      let nextToken: string | undefined;
      do {
        try {
          const page = await bedrock.send(
            new ListInferenceProfilesCommand({ typeEquals, maxResults: 1000, nextToken }),
          );
          all.push(...(page.inferenceProfileSummaries ?? []));
          nextToken = page.nextToken;
        } catch (err) {
          if (awsFailure(err).code === 'AccessDeniedException') return undefined;
          throw err;
        }
      } while (nextToken);
    }
    return all;
  }

  /** The shipped price table with the prices ConfigMap over it; the shipped one alone when that cannot be read. */
  private async prices(): Promise<BedrockPriceTable> {
    try {
      const cm = await this.client.get<{ data?: Record<string, string> }>(
        `/api/v1/namespaces/${AGENT_NAMESPACE}/configmaps/${PRICES_CONFIGMAP}`,
      );
      const text = cm?.data?.[PRICES_KEY];
      return text ? mergePrices(this.basePrices, parseBedrockPrices(text)) : this.basePrices;
    } catch {
      return this.basePrices;
    }
  }

  /** Writes `status` with the provider's AliasesAccepted condition, and the Event when its aliases start to clash. */
  private async writeStatus(ep: ExternalProvider, status: ExternalProviderStatus): Promise<ExternalProviderStatus> {
    const aliases = aliasCondition(ep, resolveNames(this.opts.deployments?.() ?? [], this.providers.list()));
    const conditions = withAliasCondition(status.conditions, aliases, this.opts.now());
    const next = conditions ? { ...status, conditions } : status;
    await writeStatusIfChanged(this.client, 'externalproviders', ep, next);
    const clash = aliasConflictEvent(ep.status?.conditions, aliases);
    if (clash) await this.events.record(ep, 'Warning', clash.reason, clash.message);
    return next;
  }

  async reconcile(key: string): Promise<ReconcileResult> {
    const ep = this.providers.get(key);
    if (!ep || ep.metadata.deletionTimestamp) {
      this.last.delete(key);
      return;
    }
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
    let next: ExternalProviderStatus;
    if (isHosted(ep.spec.provider)) {
      const outcome = await discoverHosted(
        ep,
        this.hosted,
        (name) => this.secrets.lookup(name),
        this.opts.env ?? process.env,
        this.opts.fetch,
      );
      if (!outcome.ok && isTransient(outcome.problem)) retryMs = Math.min(TRANSIENT_RETRY_MS, this.opts.rediscoveryMs);
      next = hostedProviderStatus(ep, outcome, this.opts.now(), await this.prices());
    } else {
      next = externalProviderStatus(ep, await this.discover(ep), this.opts.now(), await this.prices());
    }
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
