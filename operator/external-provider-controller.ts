import { BedrockClient, ListFoundationModelsCommand } from '@aws-sdk/client-bedrock';
import {
  type AwsEndpoints,
  accessKeyFromSecretData,
  last4,
  providerCredentials,
  type RoleCredentials,
} from '../crds/aws-credentials.js';
import { awsFailure } from '../crds/aws-errors.js';
import type { ExternalProvider } from '../crds/external-provider.js';
import type { Informer } from '../crds/informer.js';
import type { KubeClient } from '../crds/kube-client.js';
import type { NamedSecrets, SecretObject } from '../crds/named-secrets.js';
import type { EventRecorder } from './events.js';
import { availableModelIds, type DiscoveryOutcome, externalProviderStatus } from './external-provider-status.js';
import { writeStatusIfChanged } from './status-write.js';
import type { ReconcileResult } from './work-queue.js';

/**
 * Reconciles an ExternalProvider: resolves its credentials, lists the region's foundation
 * models, and records what is available. Discovery runs on a spec or Secret change and then
 * every `rediscoveryMs`; reconciles in between (our own status write, a resync) reuse the
 * last result, so a status write never triggers another discovery.
 */

export interface ExternalProviderControllerOptions {
  roles: RoleCredentials;
  endpoints?: AwsEndpoints;
  rediscoveryMs: number;
  now: () => Date;
}

interface LastDiscovery {
  generation: number;
  secretVersion: string;
  at: number;
}

export class ExternalProviderController {
  private readonly last = new Map<string, LastDiscovery>();

  constructor(
    private readonly client: KubeClient,
    private readonly providers: Informer<ExternalProvider>,
    private readonly secrets: NamedSecrets,
    private readonly events: EventRecorder,
    private readonly opts: ExternalProviderControllerOptions,
  ) {}

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
    const credentials = providerCredentials(ep, this.opts.roles, () =>
      this.secrets.lookup(ep.spec.auth.secretRef?.name ?? ''),
    );
    try {
      await credentials();
    } catch (err) {
      return { ok: false, stage: 'credentials', failure: awsFailure(err), ...keyLast4 };
    }
    const bedrock = new BedrockClient({
      region: ep.spec.region,
      credentials,
      maxAttempts: 2,
      ...(this.opts.endpoints?.bedrock ? { endpoint: this.opts.endpoints.bedrock } : {}),
    });
    try {
      const out = await bedrock.send(new ListFoundationModelsCommand({ byOutputModality: 'TEXT' }));
      return { ok: true, modelIds: availableModelIds(out.modelSummaries ?? [], ep.spec.region), ...keyLast4 };
    } catch (err) {
      return { ok: false, stage: 'discovery', failure: awsFailure(err), ...keyLast4 };
    } finally {
      bedrock.destroy();
    }
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
      now - last.at >= this.opts.rediscoveryMs ||
      ep.status?.observedGeneration !== generation;
    if (!due) return { requeueAfterMs: Math.max(1000, this.opts.rediscoveryMs - (now - last.at)) };

    const outcome = await this.discover(ep);
    this.last.set(key, { generation, secretVersion, at: now });
    const status = externalProviderStatus(ep, outcome, this.opts.now());
    await writeStatusIfChanged(this.client, 'externalproviders', ep, status);
    if (status.phase !== ep.status?.phase) {
      const ready = status.conditions?.find((c) => c.type === 'Ready');
      await this.events.record(
        ep,
        status.phase === 'Ready' ? 'Normal' : 'Warning',
        status.phase === 'Ready' ? 'Ready' : (ready?.reason ?? status.phase ?? 'Failed'),
        ready?.message ?? '',
      );
    }
    return { requeueAfterMs: this.opts.rediscoveryMs };
  }
}
