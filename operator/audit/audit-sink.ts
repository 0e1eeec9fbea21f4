import type { AuditRecord } from '../../crds/audit/audit-record.js';
import { MAX_AUDIT_BATCH } from '../../crds/audit/audit-record.js';
import { errorMessage, type Logger } from '../../crds/observability/log.js';

/**
 * Where the operator's audit records go: the proxies' POST /v1/audit, which writes them to the
 * usage store (the one database the product runs). Sent in batches, authenticated by the
 * operator's own ServiceAccount token (audience platform-ai-optimizer), and held in memory while
 * the proxies cannot take them, at most `maxHeld`, oldest dropped first and counted.
 */

/** A batch's JSON at most (the proxies take 8 MiB): one record of two 1.5 MiB objects still goes alone. */
const BATCH_BYTES = 4 * 1024 * 1024;

export interface AuditSinkOptions {
  /** The proxies' base URL (http://platform-ai-optimizer-proxy.platform-agent.svc:443). */
  url: string;
  /** The operator's token, read anew for each batch (the kubelet rotates the projected file). */
  token: () => Promise<string>;
  log: Logger;
  maxHeld?: number;
  /** How often held records are sent. Default 1 s. */
  intervalMs?: number;
  onDropped?: (n: number) => void;
}

export class AuditSink {
  private held: AuditRecord[] = [];
  private timer: NodeJS.Timeout | undefined;
  private sending: Promise<void> | undefined;
  private failures = 0;
  private nextTry = 0;

  constructor(private readonly opts: AuditSinkOptions) {}

  push(record: AuditRecord): void {
    this.held.push(record);
    const max = this.opts.maxHeld ?? 10_000;
    if (this.held.length > max) {
      const dropped = this.held.length - max;
      this.held.splice(0, dropped);
      this.opts.onDropped?.(dropped);
    }
  }

  start(): void {
    this.timer = setInterval(() => void this.flush(), this.opts.intervalMs ?? 1_000);
    this.timer.unref();
  }

  /** Sends what is held, batch by batch; stops at the first failure and backs off (1 s doubling to a minute). */
  flush(): Promise<void> {
    if (this.sending) return this.sending;
    if (!this.held.length || Date.now() < this.nextTry) return Promise.resolve();
    this.sending = this.sendHeld().finally(() => {
      this.sending = undefined;
    });
    return this.sending;
  }

  /** The next batch: up to MAX_AUDIT_BATCH records and BATCH_BYTES of JSON (at least one record). */
  private nextBatch(): { records: number; body: string } {
    const parts: string[] = [];
    let bytes = 2;
    for (const r of this.held.slice(0, MAX_AUDIT_BATCH)) {
      const json = JSON.stringify(r);
      if (parts.length && bytes + json.length + 1 > BATCH_BYTES) break;
      parts.push(json);
      bytes += json.length + 1;
    }
    return { records: parts.length, body: `[${parts.join(',')}]` };
  }

  private async sendHeld(): Promise<void> {
    while (this.held.length) {
      const batch = this.nextBatch();
      try {
        const res = await fetch(new URL('/v1/audit', this.opts.url), {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${await this.opts.token()}` },
          body: batch.body,
          signal: AbortSignal.timeout(10_000),
        });
        // A batch the proxies will never take (a record not of the shape, or too large) is dropped,
        // never retried ahead of every record after it.
        if (res.status === 400 || res.status === 413) {
          this.held.splice(0, batch.records);
          this.opts.onDropped?.(batch.records);
          this.opts.log.error('audit records refused by the proxies, dropped', {
            records: batch.records,
            status: res.status,
            error: (await res.text()).slice(0, 300),
          });
          continue;
        }
        if (!res.ok) throw new Error(`the proxies answered ${res.status}: ${(await res.text()).slice(0, 300)}`);
        this.held.splice(0, batch.records);
        this.failures = 0;
      } catch (err) {
        this.failures++;
        this.nextTry = Date.now() + Math.min(60_000, 1_000 * 2 ** (this.failures - 1));
        this.opts.log.warn('audit records not sent yet, holding them', {
          held: this.held.length,
          error: errorMessage(err),
        });
        return;
      }
    }
  }

  /** Stops the timer and tries once more to send what is held. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.nextTry = 0;
    await this.flush();
  }
}
