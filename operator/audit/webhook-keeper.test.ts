import type { ServerResponse } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import type { KubeClient } from '../../crds/kube/kube-client.js';
import type { Logger } from '../../crds/observability/log.js';
import { type KubeApiDouble, startKubeApiDouble } from '../../e2e/doubles/kube-api.js';
import { AUDIT_WEBHOOK_CONFIGURATION, auditWebhook, type WebhookConfiguration } from './audit-webhook.js';
import { holdsWebhook, WebhookKeeper } from './webhook-keeper.js';

/**
 * The keeper against an API server whose configuration the test edits, deletes and makes again,
 * and whose patches fail on demand (the real API server is in e2e/control-plane/audit.e2e.test.ts):
 * a loopback double holding the one configuration, answering its list, its watch (events as the
 * API server streams them) and server-side applies (the applied webhooks replace the held ones).
 */

const WEBHOOK = auditWebhook({ url: 'https://127.0.0.1:1' }, '-----BEGIN CERTIFICATE-----\nCA\n');

class ConfigurationDouble {
  config: WebhookConfiguration | undefined;
  patches = 0;
  /** Patches answered 500 before one is taken. */
  failing = 0;
  /** Another writer drops the webhook right after each patch. */
  fighting = false;
  private version = 1;
  private readonly watchers = new Set<ServerResponse>();
  double: KubeApiDouble | undefined;

  /** Serves, and answers the client that reaches it. */
  async start(): Promise<KubeClient> {
    this.double = await startKubeApiDouble((req, res, body) => {
      const url = new URL(req.url ?? '/', 'http://double');
      // As the chart's RBAC grants it: the collection read by the configuration's name only.
      const named = url.searchParams.get('fieldSelector') === `metadata.name=${AUDIT_WEBHOOK_CONFIGURATION}`;
      if (req.method === 'GET' && !named) {
        return res.writeHead(403, { 'content-type': 'application/json' }).end('{"kind":"Status","code":403}');
      }
      if (req.method === 'GET' && url.searchParams.get('watch') === 'true') {
        res.writeHead(200, { 'content-type': 'application/json' });
        this.watchers.add(res);
        res.on('close', () => this.watchers.delete(res));
        return;
      }
      if (req.method === 'GET') {
        const list = { kind: 'ValidatingWebhookConfigurationList', apiVersion: 'admissionregistration.k8s.io/v1' };
        const items = this.config ? [this.config] : [];
        return res.end(JSON.stringify({ ...list, metadata: { resourceVersion: String(this.version) }, items }));
      }
      if (req.method === 'PATCH') {
        this.patches++;
        if (this.failing-- > 0) return res.writeHead(500).end('{"kind":"Status","code":500}');
        const applied = JSON.parse(body) as WebhookConfiguration;
        this.put(applied.webhooks ?? [], this.config ? 'MODIFIED' : 'ADDED');
        res.end(JSON.stringify(this.config));
        if (this.fighting) setTimeout(() => this.put([], 'MODIFIED'), 5);
        return;
      }
      res.writeHead(404).end();
    });
    return this.double.client;
  }

  /** The configuration as the API server would hold it, with the event its watchers get. */
  put(webhooks: WebhookConfiguration['webhooks'], type: 'ADDED' | 'MODIFIED'): void {
    this.version++;
    this.config = {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingWebhookConfiguration',
      metadata: { name: AUDIT_WEBHOOK_CONFIGURATION, resourceVersion: String(this.version) },
      // The defaults the API server adds to a webhook.
      webhooks: (webhooks ?? []).map((w) => ({ namespaceSelector: {}, objectSelector: {}, ...w })),
    };
    this.send(type, this.config);
  }

  delete(): void {
    const gone = this.config;
    this.config = undefined;
    this.version++;
    if (gone) this.send('DELETED', { ...gone, metadata: { ...gone.metadata, resourceVersion: String(this.version) } });
  }

  private send(type: string, object: unknown): void {
    for (const w of this.watchers) w.write(`${JSON.stringify({ type, object })}\n`);
  }
}

function keptLog(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const keep = (msg: string) => {
    lines.push(msg);
  };
  return { lines, info: keep, warn: keep, error: keep };
}

const doubles: ConfigurationDouble[] = [];
const keepers: WebhookKeeper[] = [];

afterEach(async () => {
  await Promise.all(keepers.splice(0).map((k) => k.stop()));
  await Promise.all(doubles.splice(0).map((d) => d.double?.close()));
});

async function keeping(held: WebhookConfiguration['webhooks'] | undefined) {
  const api = new ConfigurationDouble();
  const client = await api.start();
  doubles.push(api);
  if (held) api.put(held, 'ADDED');
  const log = keptLog();
  const keeper = new WebhookKeeper(client, WEBHOOK, log, {
    initialMs: 50,
    maxMs: 200,
  });
  keepers.push(keeper);
  keeper.start();
  return { api, log };
}

const holds = (api: ConfigurationDouble) => api.config !== undefined && holdsWebhook(api.config, WEBHOOK);

describe("the audit webhook kept in the chart's configuration", () => {
  it('leaves a configuration that holds it alone', async () => {
    const { api } = await keeping([WEBHOOK]);
    await new Promise((r) => setTimeout(r, 300));
    expect(api.patches).toBe(0);
  });

  it('puts it back when an edit drops it (an upgrade renders the configuration empty), and when one points it elsewhere', async () => {
    const { api, log } = await keeping([WEBHOOK]);
    await new Promise((r) => setTimeout(r, 100));
    api.put([], 'MODIFIED');
    await expect.poll(() => holds(api)).toBe(true);
    expect(log.lines).toContain('audit webhook put back in its configuration (an edit had dropped or changed it)');
    const elsewhere = { ...WEBHOOK, clientConfig: { url: 'https://elsewhere.example.com/audit' } };
    api.put([elsewhere, { name: 'someone-elses.example.com' }], 'MODIFIED');
    await expect.poll(() => holds(api)).toBe(true);
    expect(api.patches).toBe(2);
  });

  it("leaves another replica's CA alone (the Secret made again since this one read it)", async () => {
    const { api } = await keeping([WEBHOOK]);
    await new Promise((r) => setTimeout(r, 100));
    const anotherCa = { ...WEBHOOK, clientConfig: { url: 'https://127.0.0.1:1/audit', caBundle: 'b3RoZXI=' } };
    api.put([anotherCa], 'MODIFIED');
    await new Promise((r) => setTimeout(r, 300));
    expect(api.patches).toBe(0);
  });

  it('answers a writer that keeps dropping it (a GitOps sync) ever more slowly, not write for write', async () => {
    const { api } = await keeping([WEBHOOK]);
    await new Promise((r) => setTimeout(r, 100));
    api.fighting = true;
    api.put([], 'MODIFIED');
    await new Promise((r) => setTimeout(r, 1_500));
    // Waits of 50, 100, 200, 400 and 800 ms between put-backs: five or six in 1.5 s, where
    // answering each drop at once would be hundreds.
    expect(api.patches).toBeGreaterThanOrEqual(3);
    expect(api.patches).toBeLessThanOrEqual(8);
  });

  it('finds an edit made before it started', async () => {
    const { api } = await keeping([]);
    await expect.poll(() => holds(api)).toBe(true);
    expect(api.patches).toBe(1);
  });

  it('tries again while the API server refuses the patch', async () => {
    const { api, log } = await keeping([WEBHOOK]);
    await new Promise((r) => setTimeout(r, 100));
    api.failing = 2;
    api.put([], 'MODIFIED');
    await expect.poll(() => holds(api)).toBe(true);
    expect(api.patches).toBe(3);
    expect(log.lines.filter((l) => l.startsWith('audit webhook not put back'))).toHaveLength(2);
  });

  it('does not make a deleted configuration again, and fills one made again', async () => {
    const { api, log } = await keeping([WEBHOOK]);
    await new Promise((r) => setTimeout(r, 100));
    api.delete();
    await expect.poll(() => log.lines.some((l) => l.startsWith('audit webhook configuration deleted'))).toBe(true);
    await new Promise((r) => setTimeout(r, 300));
    expect(api.patches).toBe(0);
    expect(api.config).toBeUndefined();
    api.put([], 'ADDED');
    await expect.poll(() => holds(api)).toBe(true);
    expect(api.patches).toBe(1);
  });
});
