import type { BudgetPeriod } from '../crds/api-key.js';
import type { Budget } from '../crds/budget.js';
import { periodEnd, periodNoun, periodStart } from '../crds/budget-period.js';
import type { KeyPolicy } from './auth.js';
import { ProxyError } from './errors.js';
import type { Tag } from './tags.js';
import type { SpendScope, UsageStore } from './usage/store.js';

/**
 * Budgets, checked before the upstream call: an ApiKey's own (spec.budget) and those of Budget
 * objects (every request carrying a tag). Spend comes from the usage store, shared by the
 * replicas, re-read every `refreshMs`; what this replica spent and has not yet written is added
 * as it happens. So a replica sees its own spend at once and the others' at most refreshMs plus
 * their recorder's batch interval (and write time) late: the overshoot past a budget is bounded
 * by what the other replicas spend in that window, plus the requests already in flight when the
 * budget ran out (their cost is known only when they end).
 */

export interface TagBudget {
  /** The Budget object's name. */
  name: string;
  tag: Tag;
  usd: number;
  period: BudgetPeriod;
}

/** A Budget object as the data plane holds it. */
export function tagBudgetOf(b: Budget): TagBudget | undefined {
  const colon = b.spec.tag.indexOf(':');
  if (colon < 1) return undefined;
  return {
    name: b.metadata.name ?? '',
    tag: { key: b.spec.tag.slice(0, colon), value: b.spec.tag.slice(colon + 1) },
    usd: b.spec.usd,
    period: b.spec.period,
  };
}

export interface BudgetGuardOptions {
  /** How often spend is re-read from the store. Default 2 s. */
  refreshMs?: number;
  /**
   * Time before which every record this replica accounted is in the store (the recorder's
   * writtenThrough): local spend up to it is dropped once a read that began after it returns.
   * Without it, local spend is kept for 5 s past each read (counted twice meanwhile).
   */
  writtenThrough?: () => number;
  now?: () => number;
  onError?: (err: unknown) => void;
}

/** Without writtenThrough: records are assumed written this long after they were accounted. */
const IN_FLIGHT_MS = 5_000;
/** Local spend is summed in slots of this many ms (bounded by time, not by requests). */
const SLOT_MS = 100;

interface Tally {
  usd: number;
  /** The period the figure is for (its start): a new period starts from zero. */
  since: number;
}

export class BudgetGuard {
  private tagBudgets = new Map<string, TagBudget>();
  private readonly stored = new Map<string, Tally>();
  /** This replica's spend per scope per SLOT_MS not yet in the store as last read. */
  private readonly local = new Map<string, Map<number, number>>();
  private timer: NodeJS.Timeout | undefined;
  private refreshing: Promise<void> | undefined;
  private readonly refreshMs: number;
  private readonly now: () => number;

  constructor(
    private readonly store: Pick<UsageStore, 'spend'>,
    private readonly keys: () => KeyPolicy[],
    private readonly opts: BudgetGuardOptions = {},
  ) {
    this.refreshMs = opts.refreshMs ?? 2_000;
    this.now = opts.now ?? Date.now;
  }

  setTagBudgets(budgets: TagBudget[]): void {
    this.tagBudgets = new Map(budgets.map((b) => [`tag:${b.tag.key}:${b.tag.value}`, b]));
  }

  tagBudgetList(): TagBudget[] {
    return [...this.tagBudgets.values()];
  }

  start(): void {
    this.timer ??= setInterval(() => void this.refresh(), this.refreshMs);
    this.timer.unref();
    void this.refresh();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Spend of every budgeted scope read again from the store; one query. */
  refresh(): Promise<void> {
    this.refreshing ??= this.load().finally(() => {
      this.refreshing = undefined;
    });
    return this.refreshing;
  }

  private async load(): Promise<void> {
    const started = this.now();
    const now = new Date(started);
    const through = this.opts.writtenThrough?.() ?? started - IN_FLIGHT_MS;
    const scopes: Array<{ id: string; scope: SpendScope }> = [];
    for (const p of this.keys()) {
      if (p.budget)
        scopes.push({ id: `key:${p.name}`, scope: { apiKey: p.name, since: periodStart(p.budget.period, now) } });
    }
    for (const [id, b] of this.tagBudgets)
      scopes.push({ id, scope: { tag: b.tag, since: periodStart(b.period, now) } });
    if (scopes.length === 0) return;
    try {
      const usd = await this.store.spend(scopes.map((s) => s.scope));
      for (const [i, s] of scopes.entries())
        this.stored.set(s.id, { usd: usd[i] ?? 0, since: s.scope.since.getTime() });
      // Slots wholly before `through` were in the store when the read began, so in what it returned.
      for (const [scope, slots] of this.local) {
        for (const slot of slots.keys()) if ((slot + 1) * SLOT_MS <= through) slots.delete(slot);
        if (slots.size === 0) this.local.delete(scope);
      }
    } catch (err) {
      // The last figures stand (the store is down: the recorder holds the records meanwhile).
      this.opts.onError?.(err);
    }
  }

  /** The period's spend of a scope as this replica knows it. */
  spent(scope: string, period: BudgetPeriod, now = this.now()): number {
    const since = periodStart(period, new Date(now)).getTime();
    const stored = this.stored.get(scope);
    let usd = stored && stored.since === since ? stored.usd : 0;
    for (const [slot, v] of this.local.get(scope) ?? []) if (slot * SLOT_MS >= since) usd += v;
    return usd;
  }

  /** Refused (429 insufficient_quota) when the key's budget or a budget of one of the tags is spent. */
  check(policy: KeyPolicy, tags: Tag[]): { error: ProxyError; scope: 'key' | 'tag' } | undefined {
    const now = this.now();
    if (policy.budget && this.spent(`key:${policy.name}`, policy.budget.period, now) >= policy.budget.usd) {
      return {
        error: exhausted(`this API key's budget of ${policy.budget.usd} USD`, policy.budget.period, now),
        scope: 'key',
      };
    }
    for (const t of tags) {
      const b = this.tagBudgets.get(`tag:${t.key}:${t.value}`);
      if (b && this.spent(`tag:${t.key}:${t.value}`, b.period, now) >= b.usd) {
        return { error: exhausted(`the budget of ${b.usd} USD for ${t.key}:${t.value}`, b.period, now), scope: 'tag' };
      }
    }
    return undefined;
  }

  /** A request's cost, counted at once toward its key's and tags' budgets on this replica. */
  add(policy: KeyPolicy, tags: Tag[], usd: number): void {
    if (usd <= 0) return;
    const slot = Math.floor(this.now() / SLOT_MS);
    const count = (scope: string) => {
      const slots = this.local.get(scope) ?? new Map<number, number>();
      this.local.set(scope, slots);
      slots.set(slot, (slots.get(slot) ?? 0) + usd);
    };
    if (policy.budget) count(`key:${policy.name}`);
    for (const t of tags) {
      const scope = `tag:${t.key}:${t.value}`;
      if (this.tagBudgets.has(scope)) count(scope);
    }
  }
}

function exhausted(what: string, period: BudgetPeriod, now: number): ProxyError {
  const reset = periodEnd(period, new Date(now));
  const seconds = Math.max(1, Math.ceil((reset.getTime() - now) / 1000));
  return new ProxyError(
    429,
    'insufficient_quota',
    'insufficient_quota',
    `${what} per ${periodNoun(period)} is spent; it resets at ${reset.toISOString()}`,
    null,
    { 'Retry-After': String(seconds) },
  );
}
