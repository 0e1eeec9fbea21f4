import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { AuditRecord } from '../../crds/audit/audit-record.js';
import { capturedLogger } from '../../e2e/support/capture.js';
import { Admissions } from './admissions.js';
import { AuditSink } from './audit-sink.js';

const record = (id: string): AuditRecord => ({
  id,
  at: '2026-11-29T10:00:00.000Z',
  source: 'kubernetes',
  action: 'updated',
  actor: { kind: 'user', name: 'alice' },
  target: { kind: 'ApiKey', name: 'ml' },
});

const servers: { close(): void }[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
});

/** A proxy that answers each POST with the next status given, and keeps what it took. */
async function proxy(statuses: number[]): Promise<{ url: string; taken: string[][]; auth: string[] }> {
  const taken: string[][] = [];
  const auth: string[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => {
      body += c.toString();
    });
    req.on('end', () => {
      auth.push(req.headers.authorization ?? '');
      const status = statuses.shift() ?? 200;
      if (status === 200) taken.push((JSON.parse(body) as AuditRecord[]).map((r) => r.id));
      res.writeHead(status).end('{}');
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  servers.push(server);
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, taken, auth };
}

describe('AuditSink', () => {
  it('holds records while the proxies fail, drops a batch they refuse as malformed, and sends the rest after it', async () => {
    const p = await proxy([503, 400, 200]);
    let dropped = 0;
    const sink = new AuditSink({
      url: p.url,
      token: async () => 'operator-token',
      log: capturedLogger('audit-sink'),
      onDropped: (n) => {
        dropped += n;
      },
    });
    sink.push(record('a'));
    await sink.flush();
    // 503: held, tried again after a back-off (the stop tries once more at once).
    expect(p.taken).toEqual([]);
    await sink.stop();
    expect(dropped).toBe(1);
    sink.push(record('b'));
    await sink.stop();
    expect(p.taken).toEqual([['b']]);
    expect(new Set(p.auth)).toEqual(new Set(['Bearer operator-token']));
  });

  it('holds at most maxHeld records, oldest dropped first', async () => {
    let dropped = 0;
    const sink = new AuditSink({
      url: 'http://127.0.0.1:9',
      token: async () => 't',
      log: capturedLogger('audit-sink'),
      maxHeld: 3,
      onDropped: (n) => {
        dropped += n;
      },
    });
    for (const id of ['a', 'b', 'c', 'd', 'e']) sink.push(record(id));
    expect(dropped).toBe(2);
  });
});

describe('Admissions under a flood', () => {
  it('holds at most 10,000 admissions, the oldest objects leaving first', () => {
    const a = new Admissions();
    const at = Date.now();
    for (let i = 0; i < 12_000; i++)
      a.remember(`u-${i}`, { operation: 'DELETE', actor: { kind: 'user', name: `n${i}` }, at });
    expect(a.take(['u-0'], true, '')).toBeUndefined();
    expect(a.take(['u-11999'], true, '')?.actor.name).toBe('n11999');
  });
});
