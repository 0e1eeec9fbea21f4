import type { ServerResponse } from 'node:http';
import { request } from 'node:https';
import { afterEach, describe, expect, it } from 'vitest';
import type { KubeClient } from '../../crds/kube/kube-client.js';
import type { Logger } from '../../crds/observability/log.js';
import { type KubeApiDouble, type KubeApiHandler, startKubeApiDouble } from '../../e2e/doubles/kube-api.js';
import { type RunningAuditTrail, startAuditTrail } from './audit-trail.js';

/**
 * The webhook's start against an API server that fails on demand (the real one is in
 * e2e/control-plane/audit.e2e.test.ts): a loopback double answering as the API server does, as
 * Status objects, for the three calls the start makes (read the TLS Secret, create it, apply the
 * webhook configuration); every other path (the watcher's lists) is a 404.
 */

const status = (res: ServerResponse, code: number, reason: string) =>
  res
    .writeHead(code, { 'content-type': 'application/json' })
    .end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', reason, code, message: reason }));

/** The API server's answers once it is up: no Secret yet, a create taken, an apply taken. */
const upAndEmpty: KubeApiHandler = (req, res, body) => {
  const path = req.url?.split('?')[0] ?? '';
  if (req.method === 'POST' && path.endsWith('/secrets')) return res.writeHead(201).end(body);
  if (req.method === 'PATCH' && path.includes('/validatingwebhookconfigurations/')) return res.writeHead(200).end(body);
  return status(res, 404, 'NotFound');
};

const doubles: KubeApiDouble[] = [];
const trails: RunningAuditTrail[] = [];

afterEach(async () => {
  await Promise.all(trails.splice(0).map((t) => t.stop()));
  await Promise.all(doubles.splice(0).map((d) => d.close()));
});

async function apiDouble(handle: KubeApiHandler): Promise<KubeClient> {
  const double = await startKubeApiDouble(handle);
  doubles.push(double);
  return double.client;
}

function keptLog(): Logger & { errors: string[] } {
  const errors: string[] = [];
  return { errors, info: () => {}, warn: () => {}, error: (msg) => errors.push(msg) };
}

async function start(client: KubeClient, log: Logger): Promise<RunningAuditTrail> {
  const trail = await startAuditTrail(
    client,
    {
      proxyUrl: 'http://127.0.0.1:9',
      token: async () => 'token',
      webhook: { endpoint: { url: 'https://127.0.0.1:1' }, port: 0, host: '127.0.0.1', names: ['127.0.0.1'] },
      webhookRetry: { initialMs: 50, maxMs: 200 },
    },
    log,
  );
  trails.push(trail);
  return trail;
}

/** A review sent to the webhook as the API server sends it, over TLS (the certificate is not checked here). */
function review(port: number): Promise<{ response?: { allowed?: boolean } }> {
  const body = JSON.stringify({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid: 'u1',
      operation: 'CREATE',
      kind: { group: 'ai.platform', version: 'v1beta1', kind: 'ApiKey' },
      name: 'k',
      namespace: 'platform-agent',
      userInfo: { username: 'alice' },
      object: { metadata: { name: 'k', namespace: 'platform-agent' } },
    },
  });
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path: '/audit',
        method: 'POST',
        rejectUnauthorized: false,
        headers: { 'content-type': 'application/json' },
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => {
          text += c.toString();
        });
        res.on('end', () => resolve(JSON.parse(text) as { response?: { allowed?: boolean } }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('the audit webhook at start', () => {
  it('is tried again while the API server answers 503, and serves once it answers', async () => {
    let refusals = 3;
    const client = await apiDouble((req, res, body) =>
      refusals-- > 0 ? status(res, 503, 'ServiceUnavailable') : upAndEmpty(req, res, body),
    );
    const log = keptLog();
    const trail = await start(client, log);
    const port = await trail.webhook;
    expect(port).toBeGreaterThan(0);
    expect(log.errors.filter((e) => e.startsWith('audit webhook not serving')).length).toBeGreaterThanOrEqual(1);
    expect((await review(port ?? 0)).response?.allowed).toBe(true);
  });

  it("is not waited for by a stop while the API server holds its calls (the Secret's read, the watcher's lists)", async () => {
    const held: ServerResponse[] = [];
    const client = await apiDouble((_req, res) => {
      held.push(res);
    });
    const trail = await start(client, keptLog());
    await expect.poll(() => held.length).toBeGreaterThan(0);
    const stopped = trail.stop().then(() => 'stopped');
    const later = new Promise((r) => setTimeout(r, 5_000, 'still waiting'));
    // The kube client's own limit is 30 s: a stop that waited for the call would be far later.
    expect(await Promise.race([stopped, later])).toBe('stopped');
    // The call fails once the API server drops it; the try, stopped meanwhile, opens nothing.
    for (const res of held) res.destroy();
    expect(await trail.webhook).toBeUndefined();
  });
});
