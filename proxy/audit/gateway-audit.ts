import { randomUUID } from 'node:crypto';
import type { AuditActor, AuditRecord, AuditTarget } from '../../crds/audit/audit-record.js';
import { errorMessage, type Logger } from '../../crds/observability/log.js';
import type { Caller } from '../access/auth.js';
import type { ProxyError } from '../endpoints/errors.js';
import type { AuditRows } from './audit-rows.js';

/**
 * What the gateway itself adds to the audit trail: sign-ins and sign-outs of the pages, refused
 * credentials, and admin actions denied. Refusals and denials are counted per actor, reason,
 * target and address, and written every WINDOW_MS, one record each with its count, so that a
 * flood of bad tokens or forbidden calls is a few rows, not a row each: at most MAX_COUNTED are
 * told apart in a window, the rest counted together. Records waiting to be written are at most
 * MAX_WAITING (a slow database drops the excess, logged), so memory stays bounded either way.
 */

const MAX_COUNTED = 200;
const WINDOW_MS = 10_000;
const MAX_WAITING = 10_000;
const ANONYMOUS: AuditActor = { kind: 'anonymous', name: '' };

/** Who a caller is in a record: a token's subject (its name where records carry it, else its hash), or its key's ApiKey. */
function actorOfCaller(caller: Caller): AuditActor {
  if (caller.identity) {
    const user = caller.policy.tags.find((t) => t.key === 'user')?.value;
    return { kind: 'token', name: user ?? `sub:${caller.keyHashPrefix}` };
  }
  return { kind: 'api-key', name: caller.policy.name || `key:${caller.keyHashPrefix}` };
}

/** A refusal or denial being counted: the record it becomes, less its id, time and count. */
type Counted = Omit<AuditRecord, 'id' | 'at' | 'source' | 'count'> & { at: string; count: number };

export class GatewayAudit {
  private counted = new Map<string, Counted>();
  private readonly timer: NodeJS.Timeout;
  private writing: Promise<void> = Promise.resolve();
  private waiting = 0;

  constructor(
    private readonly rows: AuditRows,
    private readonly log: Logger,
    private readonly now: () => Date = () => new Date(),
  ) {
    this.timer = setInterval(() => void this.flush(), WINDOW_MS);
    this.timer.unref();
  }

  signedIn(caller: Caller, from: string | undefined): void {
    this.write([this.recordOf({ action: 'signed-in', actor: actorOfCaller(caller), ...scope(caller, from, PAGES) })]);
  }

  /** A session that signs out; a cookie that is no session is not one (nobody to name). */
  signedOut(caller: Caller, from: string | undefined): void {
    this.write([this.recordOf({ action: 'signed-out', actor: actorOfCaller(caller), ...scope(caller, from, PAGES) })]);
  }

  /** An admin action a caller may not take: what it asked for, and why not. Counted. */
  denied(caller: Caller | undefined, target: AuditTarget, reason: string, from: string | undefined): void {
    this.count({
      action: 'denied',
      actor: caller ? actorOfCaller(caller) : ANONYMOUS,
      reason,
      ...(caller ? scope(caller, from, target) : { target, ...(from ? { from } : {}) }),
    });
  }

  /** Credentials refused (a wrong key, an expired or forged token). Counted. */
  refused(err: ProxyError, from: string | undefined): void {
    this.count({
      action: 'refused',
      actor: ANONYMOUS,
      target: { kind: 'Route', name: 'credentials' },
      reason: err.code,
      ...(from ? { from } : {}),
    });
  }

  /** Writes what was counted so far (every window, and at close) and waits for what is being written. */
  async flush(): Promise<void> {
    const counted = [...this.counted.values()];
    this.counted = new Map();
    if (counted.length) this.write(counted.map((c) => ({ ...c, id: randomUUID(), source: 'gateway' as const })));
    await this.writing;
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.flush();
  }

  private recordOf(r: Omit<AuditRecord, 'id' | 'at' | 'source'>): AuditRecord {
    return { id: randomUUID(), at: this.now().toISOString(), source: 'gateway', ...r };
  }

  private count(r: Omit<Counted, 'at' | 'count'>): void {
    let key = [r.action, r.reason, r.target.kind, r.target.name, r.actor.kind, r.actor.name, r.from ?? ''].join('\n');
    let entry: Omit<Counted, 'at' | 'count'> = r;
    if (!this.counted.has(key) && this.counted.size >= MAX_COUNTED) {
      key = `${r.action}\n${r.reason}\nothers`;
      entry = {
        action: r.action,
        actor: ANONYMOUS,
        target: r.target,
        from: 'others',
        ...(r.reason ? { reason: r.reason } : {}),
      };
    }
    const seen = this.counted.get(key);
    if (seen) seen.count++;
    else this.counted.set(key, { ...entry, at: this.now().toISOString(), count: 1 });
  }

  private write(records: AuditRecord[]): void {
    if (this.waiting + records.length > MAX_WAITING) {
      this.log.warn('audit records dropped: the usage database is not keeping up', { records: records.length });
      return;
    }
    this.waiting += records.length;
    this.writing = this.writing
      .then(() => this.rows.insert(records))
      .catch((err: unknown) =>
        this.log.warn('audit records not written', { records: records.length, error: errorMessage(err) }),
      )
      .finally(() => {
        this.waiting -= records.length;
      });
  }
}

const PAGES: AuditTarget = { kind: 'Session', name: 'pages' };

function scope(caller: Caller, from: string | undefined, target: AuditTarget) {
  return { target, ...(caller.policy.team ? { team: caller.policy.team } : {}), ...(from ? { from } : {}) };
}
