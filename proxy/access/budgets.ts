import type { BudgetPeriod } from '../../crds/api-key.js';
import type { Budget } from '../../crds/budget.js';
import { periodEnd, periodNoun, periodStart } from '../../crds/budget-period.js';
import { ProxyError } from '../endpoints/errors.js';
import type { Tag } from '../endpoints/tags.js';
import type { SpendScope, UsageStore } from '../usage/store.js';
import type { KeyPolicy } from './auth.js';

/**
 * Budgets, checked before the upstream call: an ApiKey's own (spec.budget) and those of Budget
 * objects (every request carrying a tag). Spend comes from the usage store, shared by the
 * replicas, re-read every `refreshMs`; what this replica spent is added as it happens and
 * counted until a read that began after its record was written has returned (the recorder says
 * which records it wrote), so its own spend is never missed and counted twice only briefly. So a replica sees its own spend at once and the others' at most refreshMs plus
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
  /** Degrade: a spent budget sends requests to the routing policy's cheapest in-cluster model instead of refusing them. */
  degrade?: true;
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
    ...(b.spec.whenSpent === 'Degrade' ? { degrade: true as const } : {}),
  };
}

/** A spent budget: its refusal, whose it is, and whether it degrades rather than refuses. */
export interface SpentBudget {
  error: ProxyError;
  scope: 'key' | 'tag';
  degrade?: true;
}

export interface BudgetGuardOptions {
  /** How often spend is re-read from the store. Default 2 s. */
  refreshMs?: number;
  now?: () => number;
  onError?: (err: unknown) => void;
}

/** Local spend is summed per scope and hour (bounded by time, not by requests). */
const HOUR_MS = 3_600_000;

type Slots = Map<string, Map<number, number>>;

function addTo(slots: Slots, scope: string, at: number, usd: number): void {
  const hour = Math.floor(at / HOUR_MS);
  const byHour = slots.get(scope) ?? new Map<number, number>();
  slots.set(scope, byHour);
  const v = (byHour.get(hour) ?? 0) + usd;
  // Sums of floats rarely return to exactly 0.
  if (Math.abs(v) < 1e-12) byHour.delete(hour);
  else byHour.set(hour, v);
  if (byHour.size === 0) slots.delete(scope);
}

function sumSince(slots: Slots, scope: string, since: number): number {
  let usd = 0;
  for (const [hour, v] of slots.get(scope) ?? []) if ((hour + 1) * HOUR_MS > since) usd += v;
  return usd;
}

interface Tally {
  usd: number;
  /** The period the figure is for (its start): a new period starts from zero. */
  since: number;
}

export class BudgetGuard {
  private tagBudgets = new Map<string, TagBudget>();
  private readonly stored = new Map<string, Tally>();
  /** This replica's spend not yet written to the store (the recorder says when it is). */
  private readonly unwritten: Slots = new Map();
  /**
   * Written, by the read epoch it was written in: a write counts here until a read that began
   * after it has returned (then the store's figure has it). Writes while a read runs may be in
   * its figure or not: they stay one more read (counted twice at worst, briefly: erring on the
   * side of the budget).
   */
  private readonly writtenByEpoch = new Map<number, Slots>();
  private epoch = 0;
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
    const scopes: Array<{ id: string; scope: SpendScope }> = [];
    for (const p of this.keys()) {
      if (p.budget)
        scopes.push({ id: `key:${p.name}`, scope: { apiKey: p.name, since: periodStart(p.budget.period, now) } });
    }
    for (const [id, b] of this.tagBudgets)
      scopes.push({ id, scope: { tag: b.tag, since: periodStart(b.period, now) } });
    if (scopes.length === 0) return;
    // Everything written before this point is in the figure the read returns.
    const before = this.epoch;
    this.epoch += 1;
    try {
      const usd = await this.store.spend(scopes.map((s) => s.scope));
      for (const [i, s] of scopes.entries())
        this.stored.set(s.id, { usd: usd[i] ?? 0, since: s.scope.since.getTime() });
      for (const e of this.writtenByEpoch.keys()) if (e <= before) this.writtenByEpoch.delete(e);
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
    usd += sumSince(this.unwritten, scope, since);
    for (const slots of this.writtenByEpoch.values()) usd += sumSince(slots, scope, since);
    return usd;
  }

  /**
   * Refused (429 insufficient_quota) when the key's budget or a budget of one of the tags is spent.
   * `degrade`: every spent budget says Degrade (whenSpent), so the request may be served on an
   * in-cluster model instead; one spent budget that says Refuse refuses it.
   */
  check(policy: KeyPolicy, tags: Tag[]): SpentBudget | undefined {
    const now = this.now();
    let degraded: SpentBudget | undefined;
    if (policy.budget && this.spent(`key:${policy.name}`, policy.budget.period, now) >= policy.budget.usd) {
      const error = exhausted(`this API key's budget of ${policy.budget.usd} USD`, policy.budget.period, now);
      if (policy.budget.whenSpent !== 'Degrade') return { error, scope: 'key' };
      degraded = { error, scope: 'key', degrade: true };
    }
    for (const t of tags) {
      const b = this.tagBudgets.get(`tag:${t.key}:${t.value}`);
      if (b && this.spent(`tag:${t.key}:${t.value}`, b.period, now) >= b.usd) {
        const error = exhausted(`the budget of ${b.usd} USD for ${t.key}:${t.value}`, b.period, now);
        if (!b.degrade) return { error, scope: 'tag' };
        degraded ??= { error, scope: 'tag', degrade: true };
      }
    }
    return degraded;
  }

  /** The scopes a request's cost counts toward: its key's budget and its tags' budgets. */
  private scopesOf(apiKey: string | undefined, withBudget: boolean, tags: Tag[]): string[] {
    const scopes = apiKey && withBudget ? [`key:${apiKey}`] : [];
    for (const t of tags) {
      const scope = `tag:${t.key}:${t.value}`;
      if (this.tagBudgets.has(scope)) scopes.push(scope);
    }
    return scopes;
  }

  /** The scopes of a record this replica may hold spend of (budgeted or from the spool's backlog). */
  private countedScopes(apiKey: string | undefined, tags: Tag[]): string[] {
    const scopes = apiKey ? [`key:${apiKey}`] : [];
    for (const t of tags) scopes.push(`tag:${t.key}:${t.value}`);
    return scopes;
  }

  /** A request's cost, counted at once toward its key's and tags' budgets on this replica. */
  add(policy: KeyPolicy, tags: Tag[], usd: number, at = this.now()): void {
    // Without budgets (most requests of most installs) this is all it costs.
    if (usd <= 0 || (!policy.budget && this.tagBudgets.size === 0)) return;
    for (const scope of this.scopesOf(policy.name, policy.budget !== undefined, tags))
      addTo(this.unwritten, scope, at, usd);
  }

  /**
   * Records made before this start and not yet in the store (the usage spool's backlog): counted
   * as this replica's own until written. Every tag's scope, as the tag budgets may not be known yet.
   */
  unwrittenRecords(records: Array<{ time: string; apiKey?: string; tags: Tag[]; costUsd: number }>): void {
    for (const r of records) {
      if (r.costUsd <= 0) continue;
      const at = Date.parse(r.time);
      if (r.apiKey) addTo(this.unwritten, `key:${r.apiKey}`, at, r.costUsd);
      for (const t of r.tags) addTo(this.unwritten, `tag:${t.key}:${t.value}`, at, r.costUsd);
    }
  }

  /**
   * Records the recorder has written (the store counts them from now on): they leave this
   * replica's own tally. Records it dropped leave it too, as the store never gets them.
   */
  written(records: Array<{ time: string; apiKey?: string; tags: Tag[]; costUsd: number }>): void {
    if (this.unwritten.size === 0) return;
    for (const r of records) {
      if (r.costUsd <= 0) continue;
      const at = Date.parse(r.time);
      // Only scopes this replica counted: a record of no counted scope costs a map lookup per tag.
      for (const scope of this.countedScopes(r.apiKey, r.tags)) {
        if (!this.unwritten.has(scope)) continue;
        addTo(this.unwritten, scope, at, -r.costUsd);
        const slots = this.writtenByEpoch.get(this.epoch) ?? new Map();
        this.writtenByEpoch.set(this.epoch, slots);
        addTo(slots, scope, at, r.costUsd);
      }
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
