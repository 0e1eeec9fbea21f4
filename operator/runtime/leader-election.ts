import { isConflict, isNotFound, type KubeClient, resourcePath } from '../../crds/kube/kube-client.js';

/**
 * Leader election on a coordination.k8s.io/v1 Lease, as client-go does it: the holder renews
 * the lease every retry period; another candidate takes it over only after the lease
 * duration passed without a renewal. Every write carries the resourceVersion it read, so
 * two candidates can never both win the same term. A leader that cannot renew before its
 * lease would expire steps down (onStoppedLeading) before anyone else may take over.
 */

export interface LeaderElectionOptions {
  namespace: string;
  name: string;
  identity: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  onStartedLeading: () => void;
  onStoppedLeading: () => void;
  onError?: (err: unknown) => void;
}

interface Lease {
  apiVersion: 'coordination.k8s.io/v1';
  kind: 'Lease';
  metadata: { name: string; namespace: string; resourceVersion?: string };
  spec: {
    holderIdentity?: string;
    leaseDurationSeconds?: number;
    acquireTime?: string;
    renewTime?: string;
    leaseTransitions?: number;
  };
}

const microTime = (d: Date) => d.toISOString().replace('Z', '000Z');

export class LeaderElector {
  private leading = false;
  private stopped = false;
  private timer: NodeJS.Timeout | undefined;
  /** The acquire-or-renew under way, if any: a release must not race it for the Lease. */
  private ticking: Promise<void> | undefined;
  private lastRenew = 0;
  private readonly path: string;
  private readonly leaseMs: number;
  private readonly renewDeadlineMs: number;
  private readonly retryMs: number;

  constructor(
    private readonly client: KubeClient,
    private readonly opts: LeaderElectionOptions,
  ) {
    this.path = resourcePath({
      group: 'coordination.k8s.io',
      version: 'v1',
      plural: 'leases',
      namespace: opts.namespace,
      name: opts.name,
    });
    this.leaseMs = opts.leaseDurationMs ?? 15_000;
    // client-go's 15 s / 10 s / 2 s, scaled down with a shorter lease: a leader must give up
    // (renew deadline) before the others may consider its lease expired (lease duration).
    this.renewDeadlineMs = opts.renewDeadlineMs ?? Math.min(10_000, Math.floor((this.leaseMs * 2) / 3));
    this.retryMs = opts.retryPeriodMs ?? Math.min(2_000, Math.floor((this.leaseMs * 2) / 15));
  }

  isLeader(): boolean {
    return this.leading;
  }

  start(): void {
    this.stopped = false;
    this.schedule(0);
  }

  private schedule(ms: number): void {
    const run = () => {
      this.ticking = this.tick().finally(() => {
        this.ticking = undefined;
      });
    };
    if (ms === 0) {
      run();
      return;
    }
    this.timer = setTimeout(run, ms);
    this.timer.unref();
  }

  /** Stops campaigning; a leader releases the lease so a successor need not wait it out. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    // A renewal still in flight would write a newer version of the Lease: the release below
    // would then conflict and fail, and the successor would have to wait the lease out.
    await this.ticking;
    if (this.leading) {
      this.leading = false;
      this.opts.onStoppedLeading();
      for (let attempt = 1; attempt <= 3; attempt++) {
        try {
          const lease = await this.client.get<Lease>(this.path);
          if (lease?.spec.holderIdentity === this.opts.identity) {
            await this.client.replace(this.path, {
              ...lease,
              spec: { ...lease.spec, holderIdentity: '', leaseDurationSeconds: 1, renewTime: microTime(new Date(0)) },
            });
          }
          break;
        } catch (err) {
          if (attempt === 3) this.opts.onError?.(err);
        }
      }
    }
  }

  private async tick(): Promise<void> {
    if (this.stopped) return;
    // The renewTime written is taken before the request: measure the deadline from there too.
    const attempt = Date.now();
    try {
      const acquired = await this.withinRenewDeadline(this.tryAcquireOrRenew());
      if (acquired) {
        this.lastRenew = attempt;
        if (!this.leading) {
          this.leading = true;
          this.opts.onStartedLeading();
        }
      } else if (this.leading) {
        this.stepDown();
      }
    } catch (err) {
      this.opts.onError?.(err);
      if (this.leading && Date.now() - this.lastRenew >= this.renewDeadlineMs) this.stepDown();
    }
    if (!this.stopped) this.schedule(this.retryMs);
  }

  /**
   * A leader's renewal that does not answer before the renew deadline counts as failed, so
   * that a hanging request cannot keep it leading after others may have taken the lease over.
   */
  private withinRenewDeadline(renewal: Promise<boolean>): Promise<boolean> {
    if (!this.leading) return renewal;
    const left = Math.max(0, this.lastRenew + this.renewDeadlineMs - Date.now());
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`lease not renewed within ${this.renewDeadlineMs} ms`)), left);
      timer.unref();
      renewal.then(
        (ok) => {
          clearTimeout(timer);
          resolve(ok);
        },
        (err: unknown) => {
          clearTimeout(timer);
          reject(err);
        },
      );
    });
  }

  private stepDown(): void {
    this.leading = false;
    this.opts.onStoppedLeading();
  }

  private async tryAcquireOrRenew(): Promise<boolean> {
    const now = new Date();
    const lease = await this.client.get<Lease>(this.path);
    const mine = {
      holderIdentity: this.opts.identity,
      leaseDurationSeconds: Math.ceil(this.leaseMs / 1000),
      renewTime: microTime(now),
    };
    if (!lease) {
      try {
        await this.client.create(
          resourcePath({
            group: 'coordination.k8s.io',
            version: 'v1',
            plural: 'leases',
            namespace: this.opts.namespace,
          }),
          {
            apiVersion: 'coordination.k8s.io/v1',
            kind: 'Lease',
            metadata: { name: this.opts.name, namespace: this.opts.namespace },
            spec: { ...mine, acquireTime: microTime(now), leaseTransitions: 0 },
          } satisfies Lease,
        );
        return true;
      } catch (err) {
        if (isConflict(err)) return false;
        throw err;
      }
    }
    const held = lease.spec.holderIdentity;
    const renewed = lease.spec.renewTime ? Date.parse(lease.spec.renewTime) : 0;
    const duration = (lease.spec.leaseDurationSeconds ?? 0) * 1000;
    if (held && held !== this.opts.identity && renewed + duration > now.getTime()) return false;
    const takeover = held !== this.opts.identity;
    try {
      await this.client.replace(this.path, {
        ...lease,
        spec: {
          ...lease.spec,
          ...mine,
          ...(takeover
            ? { acquireTime: microTime(now), leaseTransitions: (lease.spec.leaseTransitions ?? 0) + 1 }
            : {}),
        },
      });
      return true;
    } catch (err) {
      // Someone else wrote the lease since we read it: they won this round.
      if (isConflict(err) || isNotFound(err)) return false;
      throw err;
    }
  }
}
