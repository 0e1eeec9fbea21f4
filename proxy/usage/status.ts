import type { ApiKey, BudgetPeriod, UsageStatus } from '../../crds/api-key.js';
import type { Budget } from '../../crds/budget.js';
import { periodStart } from '../../crds/budget-period.js';
import { AGENT_NAMESPACE, API_GROUP, API_VERSION } from '../../crds/constants.js';
import { type KubeClient, resourcePath } from '../../crds/kube/kube-client.js';
import { rfc3339 } from '../../crds/meta.js';
import type { SpendScope, UsageStore } from './store.js';

/**
 * Writes what the proxies observe into ApiKey and Budget status (`status.usage`): the current
 * period's spend from the usage store and, for keys, when this replica last saw them used. Every
 * `intervalMs` (a minute), each object is patched only when its figures moved, so a quiet key
 * costs nothing and a busy one one write a minute per replica. The operator turns the figures
 * into conditions and Events; the proxy's own budget checks do not wait for any of this.
 */

export interface UsageStatusSource {
  apiKeyObjects(): ApiKey[];
  budgetObjects(): Budget[];
  client: KubeClient;
}

const round = (usd: number) => Math.round(usd * 1e6) / 1e6;

export class UsageStatusWriter {
  private readonly lastUsed = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private next: Promise<void> | undefined;

  constructor(
    private readonly source: UsageStatusSource,
    private readonly store: Pick<UsageStore, 'spend'>,
    private readonly opts: { intervalMs?: number; now?: () => number; onError?: (err: unknown) => void } = {},
  ) {}

  /** A request came with this ApiKey (cheap: one map write). */
  used(name: string): void {
    if (name) this.lastUsed.set(name, this.now());
  }

  private now(): number {
    return this.opts.now?.() ?? Date.now();
  }

  start(): void {
    this.timer ??= setInterval(() => void this.write(), this.opts.intervalMs ?? 60_000);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /**
   * One round of writes, with the figures as of this call (a final write at shutdown, tests). A
   * round already running read the store before it, so another follows that one, shared by every
   * call made meanwhile.
   */
  write(): Promise<void> {
    if (!this.running) {
      this.running = this.round().finally(() => {
        this.running = undefined;
      });
      return this.running;
    }
    // After the running round however it ended: a round that threw must not leave `next` set.
    const after = () => {
      this.next = undefined;
      return this.write();
    };
    this.next ??= this.running.then(after, after);
    return this.next;
  }

  private async round(): Promise<void> {
    const now = new Date(this.now());
    const keys = this.source.apiKeyObjects().filter((k) => k.status?.digest);
    const budgets = this.source.budgetObjects();
    const periodOf = (p: BudgetPeriod | undefined): BudgetPeriod => p ?? 'Monthly';
    const scopes: SpendScope[] = [
      ...keys.map((k) => ({ apiKey: k.metadata.name ?? '', since: periodStart(periodOf(k.spec.budget?.period), now) })),
      ...budgets.flatMap((b) => {
        const colon = b.spec.tag.indexOf(':');
        return colon < 1
          ? []
          : [
              {
                tag: { key: b.spec.tag.slice(0, colon), value: b.spec.tag.slice(colon + 1) },
                since: periodStart(b.spec.period, now),
              },
            ];
      }),
    ];
    let spend: number[];
    try {
      spend = await this.store.spend(scopes);
    } catch (err) {
      this.opts.onError?.(err);
      return;
    }
    const writes: Array<Promise<void>> = [];
    for (const [i, k] of keys.entries()) {
      const period = periodOf(k.spec.budget?.period);
      const old = k.status?.usage;
      const seen = this.lastUsed.get(k.metadata.name ?? '');
      const lastUsed = Math.max(seen ?? 0, old?.lastUsed ? Date.parse(old.lastUsed) : 0);
      const next: UsageStatus = {
        period,
        periodStart: rfc3339(periodStart(period, now)),
        spendUsd: round(spend[i] ?? 0),
        ...(lastUsed > 0 ? { lastUsed: rfc3339(new Date(lastUsed)) } : {}),
      };
      if (!moved(old, next)) continue;
      writes.push(this.patch('apikeys', k.metadata.name ?? '', { ...next, updated: rfc3339(now) }));
    }
    for (const [j, b] of budgets.entries()) {
      const next: UsageStatus = {
        period: b.spec.period,
        periodStart: rfc3339(periodStart(b.spec.period, now)),
        spendUsd: round(spend[keys.length + j] ?? 0),
      };
      if (!moved(b.status?.usage, next)) continue;
      writes.push(this.patch('budgets', b.metadata.name ?? '', { ...next, updated: rfc3339(now) }));
    }
    const results = await Promise.allSettled(writes);
    for (const r of results) if (r.status === 'rejected') this.opts.onError?.(r.reason);
  }

  private async patch(plural: string, name: string, usage: UsageStatus): Promise<void> {
    await this.source.client.mergePatch(
      resourcePath({
        group: API_GROUP,
        version: API_VERSION,
        plural,
        namespace: AGENT_NAMESPACE,
        name,
        subresource: 'status',
      }),
      { status: { usage } },
    );
  }
}

/** Worth a write: a new period, other spend, or a last use a minute or more after the one shown. */
function moved(old: UsageStatus | undefined, next: UsageStatus): boolean {
  if (!old) return true;
  if (old.period !== next.period || old.periodStart !== next.periodStart || old.spendUsd !== next.spendUsd) return true;
  const before = old.lastUsed ? Date.parse(old.lastUsed) : 0;
  const after = next.lastUsed ? Date.parse(next.lastUsed) : 0;
  return after - before >= 60_000;
}
