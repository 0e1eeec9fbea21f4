import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { AuditRecord } from '../../crds/audit/audit-record.js';
import { OPERATOR_SERVICE_ACCOUNT, TOKEN_AUDIENCE } from '../../crds/constants.js';
import { AUDIT_WEBHOOK_CONFIGURATION } from '../../operator/audit/audit-webhook.js';
import { WEBHOOK_TLS_SECRET } from '../../operator/audit/webhook-tls.js';
import { Operator } from '../../operator/operator.js';
import { freePort } from '../support/cached-build.js';
import { capturedLogger } from '../support/capture.js';
import { startClusterGateway } from '../support/cluster-gateway.js';
import type { TestGateway } from '../support/gateway.js';
import { eventually, kubeConfig, kubectl, kubectlOk } from '../support/kube.js';

/**
 * The audit trail on the real control plane: people change the ai.platform objects with kubectl
 * (impersonated, as the API server authenticates them), the API server sends each change to the
 * operator's admission webhook (TLS under the CA the operator made, in its Secret), the operator
 * sees the change stored and sends the record to the proxy, proven by its own ServiceAccount
 * token (TokenReview), and the proxy's GET /v1/audit answers who changed what, before and after.
 */

const NS = 'platform-agent';
const ADMIN_KEY = 'sk-audit-cluster-admin-0000000000000000';
let gateway: TestGateway;
let operator: Operator;
/** What the operator logged while the webhook's port was held. */
let heldPortFailure: string;

/**
 * kubectl as a person: their name and groups, as an OIDC or certificate sign-in gives them
 * (system:masters lets them write). Run apart, not with spawnSync: the webhook the API server
 * calls meanwhile is served by this process.
 */
async function as(user: string, args: string[], input?: string): Promise<string> {
  const child = spawn(
    inject('kubectl'),
    [
      '--kubeconfig',
      inject('kubeconfig'),
      '--as',
      user,
      '--as-group',
      'system:masters',
      '--as-group',
      'platform-admins',
      ...args,
    ],
    { stdio: ['pipe', 'pipe', 'pipe'] },
  );
  child.stdin.end(input ?? '');
  let out = '';
  let err = '';
  child.stdout.on('data', (c: Buffer) => {
    out += c.toString();
  });
  child.stderr.on('data', (c: Buffer) => {
    err += c.toString();
  });
  const [code] = (await once(child, 'close')) as [number];
  if (code !== 0) throw new Error(`kubectl --as ${user} ${args.join(' ')} failed (${code}): ${err}`);
  return out;
}

const apiKey = (name: string, usd: number, team = 'ml') =>
  JSON.stringify({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ApiKey',
    metadata: { name, namespace: NS },
    spec: { team, budget: { usd, period: 'Monthly' } },
  });

async function audit(query: string, key = ADMIN_KEY): Promise<AuditRecord[]> {
  const res = await gateway.request(`/v1/audit?${query}`, { headers: { 'x-api-key': key } });
  if (res.status !== 200) throw new Error(`GET /v1/audit: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { data: AuditRecord[] }).data;
}

/** The records of one object once there are `n` (newest first). */
const recordsOf = (kind: string, name: string, n: number) =>
  eventually(`${n} audit records of ${kind} ${name}`, 30_000, async () => {
    const found = await audit(`kind=${kind}&name=${name}`);
    return found.length >= n ? found : undefined;
  });

/** The chart's configuration as Helm renders it: the operator adds its webhook. */
const emptyConfiguration = () =>
  JSON.stringify({
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingWebhookConfiguration',
    metadata: { name: AUDIT_WEBHOOK_CONFIGURATION },
    webhooks: [],
  });

/** The webhooks the configuration holds now. */
const webhookNames = (): string[] =>
  (
    JSON.parse(kubectlOk(['get', 'validatingwebhookconfiguration', AUDIT_WEBHOOK_CONFIGURATION, '-o', 'json'])) as {
      webhooks?: Array<{ name: string }>;
    }
  ).webhooks?.map((w) => w.name) ?? [];

/**
 * The author recorded for the probe key's next change by `user`: changed until a record of theirs
 * names them (the API server takes a moment to call a webhook just put in its configuration).
 */
async function authorOfNextChange(user: string): Promise<string> {
  const record = await eventually(`a change by ${user} recorded with its author`, 30_000, async () => {
    await as(user, ['apply', '-f', '-'], apiKey('audit-probe', 2000 + (Date.now() % 1000)));
    await new Promise((r) => setTimeout(r, 1_000));
    return (await audit('kind=ApiKey&name=audit-probe&action=updated')).find((r) => r.actor.name === user);
  });
  return record.actor.name;
}

beforeAll(async () => {
  kubectl(['create', 'serviceaccount', OPERATOR_SERVICE_ACCOUNT, '-n', NS]);
  // The chart's configuration, empty (client-side apply, as Helm makes it): the operator adds its webhook.
  kubectlOk(['apply', '-f', '-'], emptyConfiguration());
  gateway = await startClusterGateway(ADMIN_KEY);
  // The operator's token, as the chart's projected volume gives it.
  const token = kubectlOk([
    'create',
    'token',
    OPERATOR_SERVICE_ACCOUNT,
    '-n',
    NS,
    '--audience',
    TOKEN_AUDIENCE,
    '--duration',
    '20m',
  ]).trim();
  const port = await freePort();
  // The webhook's port is held as the operator starts (as by a predecessor not yet gone): the
  // webhook is tried again, and serves once the port is free.
  const holder = createServer();
  holder.listen(port, '127.0.0.1');
  await once(holder, 'listening');
  const log = capturedLogger('operator-audit');
  const failures: string[] = [];
  operator = new Operator({
    kubeConfig: kubeConfig(),
    cluster: { organizationId: 'acme', clusterId: 'c1', cloud: 'aws', region: 'us-east-1' },
    images: { Ollama: 'ollama/ollama:test' },
    port: 0,
    resyncMs: 0,
    leaderElection: false,
    logger: {
      ...log,
      error: (msg, fields) => {
        failures.push(`${msg}: ${String(fields?.error)}`);
        log.error(msg, fields);
      },
    },
    audit: {
      proxyUrl: gateway.url,
      token: async () => token,
      webhook: { endpoint: { url: `https://127.0.0.1:${port}` }, port, host: '127.0.0.1', names: ['127.0.0.1'] },
      graceMs: 500,
      webhookRetry: { initialMs: 200, maxMs: 1_000 },
    },
  });
  await operator.start();
  const trail = await operator.audit();
  if (!trail) throw new Error(`the audit trail did not start: ${failures.join('; ')}`);
  heldPortFailure = await eventually('the operator to tell its webhook is not serving', 30_000, () =>
    failures.find((f) => f.startsWith('audit webhook not serving')),
  );
  await new Promise((resolve) => holder.close(resolve));
  let served: number | undefined;
  void trail.webhook.then((p) => {
    served = p;
  });
  await eventually('the audit webhook to serve', 30_000, () => {
    if (served) return served;
    throw new Error(failures.at(-1) ?? 'nothing logged');
  });
  // The API server takes a moment to call a webhook configuration just applied: a probe object,
  // changed until its record names its author.
  await eventually('the API server calls the audit webhook', 30_000, async () => {
    await as('probe', ['apply', '-f', '-'], apiKey('audit-probe', Date.now() % 1000));
    return (await audit('kind=ApiKey&name=audit-probe')).find((r) => r.actor.name === 'probe');
  });
}, 120_000);

afterAll(async () => {
  await operator?.stop();
  await gateway?.stop();
  kubectl(['delete', 'validatingwebhookconfiguration', AUDIT_WEBHOOK_CONFIGURATION, '--ignore-not-found']);
  kubectl(['delete', 'secret', WEBHOOK_TLS_SECRET, '-n', NS, '--ignore-not-found']);
  kubectl(['delete', 'apikey', 'audit-ml', 'audit-dry', 'audit-reader', 'audit-probe', '-n', NS, '--ignore-not-found']);
  kubectl(['delete', 'mcpserver', 'audit-tools', '-n', NS, '--ignore-not-found']);
  kubectl(['delete', 'serviceaccount', OPERATOR_SERVICE_ACCOUNT, '-n', NS, '--ignore-not-found']);
});

describe('the audit trail of the ai.platform objects', () => {
  it('serves its webhook once the port held as the operator started is free: changes then name their author', async () => {
    expect(heldPortFailure).toMatch(/EADDRINUSE/);
    const probes = await audit('kind=ApiKey&name=audit-probe');
    expect(probes.map((r) => r.actor.name)).toContain('probe');
  });

  it("answers who changed this key's budget, and when: create, edit and delete, each by its author, with before and after", async () => {
    // A dry run is answered by the webhook and never recorded: nothing was changed.
    await as('alice', ['apply', '--dry-run=server', '-f', '-'], apiKey('audit-dry', 5));
    await as('alice', ['apply', '-f', '-'], apiKey('audit-ml', 10));
    await recordsOf('ApiKey', 'audit-ml', 1);
    await as('bob', [
      'patch',
      'apikey',
      'audit-ml',
      '-n',
      NS,
      '--type',
      'merge',
      '-p',
      '{"spec":{"budget":{"usd":50}}}',
    ]);
    await recordsOf('ApiKey', 'audit-ml', 2);
    await as('carol', ['delete', 'apikey', 'audit-ml', '-n', NS]);
    const [deleted, updated, created] = await recordsOf('ApiKey', 'audit-ml', 3);
    expect(created).toMatchObject({
      source: 'kubernetes',
      action: 'created',
      actor: { kind: 'user', name: 'alice', groups: ['system:masters', 'platform-admins'] },
      target: { kind: 'ApiKey', namespace: NS, name: 'audit-ml' },
      team: 'ml',
      after: { spec: { team: 'ml', budget: { usd: 10 } } },
    });
    expect(updated).toMatchObject({
      action: 'updated',
      actor: { kind: 'user', name: 'bob' },
      changed: ['spec.budget.usd'],
      before: { spec: { budget: { usd: 10 } } },
      after: { spec: { budget: { usd: 50 } } },
      from: 'field manager kubectl-patch',
    });
    expect(deleted).toMatchObject({ action: 'deleted', actor: { kind: 'user', name: 'carol' } });
    expect(Date.parse(created?.at ?? '')).toBeLessThan(Date.parse(deleted?.at ?? ''));
    // The operator's own status writes (the key's digest) are not changes anyone made; nor was the dry run.
    expect(await audit('kind=ApiKey&name=audit-ml')).toHaveLength(3);
    expect(await audit('kind=ApiKey&name=audit-dry')).toEqual([]);
  }, 60_000);

  it('never shows a Secret name, only that it changed', async () => {
    const server = (secret: string) =>
      JSON.stringify({
        apiVersion: 'ai.platform/v1beta1',
        kind: 'McpServer',
        metadata: { name: 'audit-tools', namespace: NS },
        spec: { url: 'http://127.0.0.1:9/mcp', auth: { method: 'Bearer', secretRef: { name: secret } } },
      });
    await as('alice', ['apply', '-f', '-'], server('tools-token-one'));
    await recordsOf('McpServer', 'audit-tools', 1);
    await as('alice', ['apply', '-f', '-'], server('tools-token-two'));
    const [updated] = await recordsOf('McpServer', 'audit-tools', 2);
    expect(updated).toMatchObject({
      changed: ['spec.auth.secretRef.name'],
      after: { spec: { auth: { method: 'Bearer', secretRef: '<redacted>' } } },
    });
    const res = await gateway.request('/v1/audit?format=ndjson', { headers: { 'x-api-key': ADMIN_KEY } });
    expect(await res.text()).not.toMatch(/tools-token-(one|two)/);
  }, 60_000);

  it("lets a User key read its own team's records only, and records an attempt to write records", async () => {
    await as('alice', ['apply', '-f', '-'], apiKey('audit-reader', 1, 'search'));
    const key = await eventually('the reader key is issued and loaded', 30_000, async () => {
      const data = kubectl(['get', 'secret', 'apikey-audit-reader', '-n', NS, '-o', 'jsonpath={.data.key}']).stdout;
      const k = data ? Buffer.from(data, 'base64').toString() : '';
      if (!k) return undefined;
      const res = await gateway.request('/v1/audit', { headers: { 'x-api-key': k } });
      return res.status === 200 ? k : undefined;
    });
    // Its own creation is of its team: there once the operator sent it.
    const seen = await eventually('the reader sees its team', 10_000, async () => {
      const found = await audit('', key);
      return found.length ? found : undefined;
    });
    expect(new Set(seen.map((r) => r.team))).toEqual(new Set(['search']));
    const forged = await gateway.request('/v1/audit', {
      method: 'POST',
      headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' },
      body: '[]',
    });
    expect(forged.status).toBe(403);
    // Denials are counted and written every 10 s.
    const denied = await eventually('the denial recorded', 25_000, async () => (await audit('action=denied'))[0]);
    expect(denied).toMatchObject({
      actor: { kind: 'api-key' },
      reason: 'operator_only',
      target: { name: 'POST /v1/audit' },
    });
  }, 60_000);

  it('puts its webhook back when an upgrade renders its configuration empty again: changes still name their author', async () => {
    // As `helm upgrade` writes the chart's configuration (webhooks: []) over the one the operator filled.
    kubectlOk(['replace', '-f', '-'], emptyConfiguration());
    await eventually('the webhook back in its configuration', 30_000, () =>
      webhookNames().length > 0 ? true : undefined,
    );
    expect(webhookNames()).toEqual(['audit.ai.platform']);
    expect(await authorOfNextChange('erin')).toBe('erin');
  }, 60_000);

  it('still records a change the webhook never saw (its configuration gone), its author unknown; the configuration is not made again', async () => {
    kubectlOk(['delete', 'validatingwebhookconfiguration', AUDIT_WEBHOOK_CONFIGURATION]);
    // The API server stops calling it within moments; each change until then is recorded with its author.
    const unknown = await eventually('a change recorded without its author', 30_000, async () => {
      await as('dave', ['apply', '-f', '-'], apiKey('audit-probe', 100 + (Date.now() % 1000)));
      await new Promise((r) => setTimeout(r, 1_500));
      return (await audit('kind=ApiKey&name=audit-probe&action=updated')).find((r) => r.actor.kind === 'unknown');
    });
    expect(unknown).toMatchObject({ source: 'kubernetes', actor: { name: '' }, changed: ['spec.budget.usd'] });
    // Deleting it is the uninstall's or an administrator's call: the operator leaves it deleted.
    expect(kubectl(['get', 'validatingwebhookconfiguration', AUDIT_WEBHOOK_CONFIGURATION]).stderr).toMatch(/NotFound/);
  }, 60_000);

  it('fills its configuration made again (helm upgrade): changes name their author again', async () => {
    kubectlOk(['create', '-f', '-'], emptyConfiguration());
    await eventually('the webhook in the configuration made again', 30_000, () =>
      webhookNames().length > 0 ? true : undefined,
    );
    expect(await authorOfNextChange('frank')).toBe('frank');
  }, 60_000);
});
