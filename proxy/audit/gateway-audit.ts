import { randomUUID } from 'node:crypto';
import type { AuditActor, AuditRecord, AuditTarget } from '../../crds/audit/audit-record.js';
import { errorMessage, type Logger } from '../../crds/observability/log.js';
import type { Caller } from '../access/auth.js';
import type { ProxyError } from '../endpoints/errors.js';
import type { AuditRows } from './audit-rows.js';

/**
 * What the gateway itself adds to the audit trail: sign-ins and sign-outs of the pages, refused
 * credentials, and admin actions denied. Refusals are counted per code and address and written
 * once a minute, one record each, so that a flood of bad tokens is a few rows, not a row each;
 * at most MAX_REFUSAL_KEYS are told apart in a minute, the rest counted together.
 */

const MAX_REFUSAL_KEYS = 1_000;

/** Who a caller is in a record: a token's subject (its name where records carry it, else its hash), or its key's ApiKey. */
function actorOfCaller(caller: Caller): AuditActor {
  if (caller.identity) {
    const user = caller.policy.tags.find((t) => t.key === 'user')?.value;
    return { kind: 'token', name: user ?? `sub:${caller.keyHashPrefix}` };
  }
  return { kind: 'api-key', name: caller.policy.name || `key:${caller.keyHashPrefix}` };
}

interface Refusals {
  code: string;
  from: string;
  count: number;
  at: string;
}

export class GatewayAudit {
  private refusals = new Map<string, Refusals>();
  private readonly timer: NodeJS.Timeout;
  private writing: Promise<void> = Promise.resolve();

  constructor(
    private readonly rows: AuditRows,
    private readonly log: Logger,
    private readonly now: () => Date = () => new Date(),
  ) {
    this.timer = setInterval(() => void this.flush(), 60_000);
    this.timer.unref();
  }

  /** One record of the gateway's, written in the background (a failure is logged, never the caller's). */
  record(r: Omit<AuditRecord, 'id' | 'at' | 'source'>): void {
    this.write([{ id: randomUUID(), at: this.now().toISOString(), source: 'gateway', ...r }]);
  }

  signedIn(caller: Caller, from: string | undefined): void {
    this.record({
      action: 'signed-in',
      actor: actorOfCaller(caller),
      ...this.scope(caller, from, { kind: 'Session', name: 'pages' }),
    });
  }

  signedOut(caller: Caller | undefined, from: string | undefined): void {
    this.record({
      action: 'signed-out',
      actor: caller ? actorOfCaller(caller) : { kind: 'anonymous', name: '' },
      ...(caller
        ? this.scope(caller, from, { kind: 'Session', name: 'pages' })
        : { target: { kind: 'Session', name: 'pages' } }),
    });
  }

  /** An admin action a caller may not take: what it asked for, and why not. */
  denied(caller: Caller | undefined, target: AuditTarget, reason: string, from: string | undefined): void {
    this.record({
      action: 'denied',
      actor: caller ? actorOfCaller(caller) : { kind: 'anonymous', name: '' },
      reason,
      ...(caller ? this.scope(caller, from, target) : { target, ...(from ? { from } : {}) }),
    });
  }

  /** Credentials refused (a wrong key, an expired or forged token): counted, written within a minute. */
  refused(err: ProxyError, from: string | undefined): void {
    let key = `${err.code}|${from ?? ''}`;
    if (!this.refusals.has(key) && this.refusals.size >= MAX_REFUSAL_KEYS) key = `${err.code}|others`;
    const seen = this.refusals.get(key);
    if (seen) seen.count++;
    else
      this.refusals.set(key, {
        code: err.code,
        from: key.endsWith('|others') ? 'others' : (from ?? ''),
        count: 1,
        at: this.now().toISOString(),
      });
  }

  /** Writes the refusals counted so far (every minute, and at close) and waits for what is being written. */
  async flush(): Promise<void> {
    const counted = [...this.refusals.values()];
    this.refusals = new Map();
    if (counted.length) {
      this.write(
        counted.map((r) => ({
          id: randomUUID(),
          at: r.at,
          source: 'gateway' as const,
          action: 'refused' as const,
          actor: { kind: 'anonymous' as const, name: '' },
          target: { kind: 'Route', name: 'credentials' },
          reason: r.code,
          count: r.count,
          ...(r.from ? { from: r.from } : {}),
        })),
      );
    }
    await this.writing;
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.flush();
  }

  private scope(caller: Caller, from: string | undefined, target: AuditTarget) {
    return { target, ...(caller.policy.team ? { team: caller.policy.team } : {}), ...(from ? { from } : {}) };
  }

  private write(records: AuditRecord[]): void {
    this.writing = this.writing
      .then(() => this.rows.insert(records))
      .catch((err: unknown) =>
        this.log.warn('audit records not written', { records: records.length, error: errorMessage(err) }),
      );
  }
}
