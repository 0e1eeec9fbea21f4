import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOKEN_AUDIENCE } from '../../crds/constants.js';
import { Operator } from '../../operator/operator.js';
import { capturedLogger } from '../support/capture.js';
import { startClusterGateway } from '../support/cluster-gateway.js';
import type { TestGateway } from '../support/gateway.js';
import { applyObjects, eventually, kubeConfig, kubectl, kubectlOk } from '../support/kube.js';
import { settledRequestCount } from '../support/operator-requests.js';

/**
 * Kubernetes workload identity on the real control plane: a ServiceAccount's token, issued by the
 * API server for the audience platform-ai-optimizer, is the caller's only credential. The proxy
 * (cluster mode) checks it against the API server's discovery document and keys, or asks the API
 * server by TokenReview, and maps the ServiceAccount to an ApiKey's grants by its IdentityProvider.
 */

const NS = 'platform-agent';
const APPS = 'pao-identity-apps';
const OTHER = 'pao-identity-other';
const ADMIN_KEY = 'sk-identity-cluster-admin-000000000000000';
let gateway: TestGateway;
let operator: Operator;

const provider = (verify: 'Discovery' | 'TokenReview') => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'IdentityProvider',
  metadata: { name: 'cluster-workloads', namespace: NS },
  spec: {
    kubernetes: { verify },
    audiences: [TOKEN_AUDIENCE],
    profiles: [{ apiKey: 'identity-apps', serviceAccount: { namespace: APPS, names: ['trainer'] } }],
  },
});

/** A token of a ServiceAccount, as a projected volume or `kubectl create token` gets it. */
const tokenOf = (ns: string, sa: string, ...args: string[]) =>
  kubectlOk(['create', 'token', sa, '-n', ns, '--duration', '10m', ...args]).trim();

const models = (token: string) =>
  gateway.request('/openai/v1/models', { headers: { authorization: `Bearer ${token}` } });

async function refusal(token: string): Promise<[number, string]> {
  const res = await models(token);
  const body = (await res.json()) as { error?: { code?: string } };
  return [res.status, body.error?.code ?? ''];
}

beforeAll(async () => {
  for (const ns of [APPS, OTHER]) kubectl(['create', 'namespace', ns]);
  kubectl(['create', 'serviceaccount', 'trainer', '-n', APPS]);
  kubectl(['create', 'serviceaccount', 'trainer', '-n', OTHER]);
  applyObjects(
    {
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ApiKey',
      metadata: { name: 'identity-apps', namespace: NS },
      spec: { team: 'apps', models: ['nothing-routed'] },
    },
    provider('Discovery'),
  );
  gateway = await startClusterGateway(ADMIN_KEY);
  operator = new Operator({
    kubeConfig: kubeConfig(),
    cluster: { organizationId: 'acme', clusterId: 'c1', cloud: 'aws', region: 'us-east-1' },
    images: { Ollama: 'ollama/ollama:test' },
    port: 0,
    resyncMs: 0,
    leaderElection: false,
    logger: capturedLogger('operator-identity'),
  });
  await operator.start();
}, 60_000);

afterAll(async () => {
  await operator?.stop();
  await gateway?.stop();
  kubectl(['delete', 'identityprovider', 'unreachable-sso', '-n', NS, '--ignore-not-found']);
  kubectl(['delete', 'identityprovider', 'cluster-workloads', '-n', NS, '--ignore-not-found']);
  kubectl(['delete', 'apikey', 'identity-apps', '-n', NS, '--ignore-not-found']);
  for (const ns of [APPS, OTHER]) kubectl(['delete', 'namespace', ns, '--wait=false']);
});

describe('a workload calling with its ServiceAccount token', () => {
  it("is taken by the API server's discovery keys and gets its ServiceAccount's profile", async () => {
    const token = tokenOf(APPS, 'trainer', '--audience', TOKEN_AUDIENCE);
    const res = await eventually('the token is taken', 15_000, async () => {
      const r = await models(token);
      return r.status === 200 ? r : undefined;
    });
    // The profile's allow-list: the one model it names, which nothing routes, so none is listed.
    expect(((await res.json()) as { data: unknown[] }).data).toEqual([]);
    // Another audience (the API server's own), another namespace's ServiceAccount: refused.
    expect(await refusal(tokenOf(APPS, 'trainer'))).toEqual([401, 'wrong_audience']);
    expect(await refusal(tokenOf(OTHER, 'trainer', '--audience', TOKEN_AUDIENCE))).toEqual([403, 'no_profile']);
    // The static key still works beside tokens.
    expect((await gateway.request('/openai/v1/models', { headers: { 'x-api-key': ADMIN_KEY } })).status).toBe(200);
  });

  it('by TokenReview, refuses a token whose pod or object is gone before it expires', async () => {
    kubectl(['create', 'secret', 'generic', 'bound-to', '-n', APPS]);
    const uid = kubectlOk(['get', 'secret', 'bound-to', '-n', APPS, '-o', 'jsonpath={.metadata.uid}']).trim();
    const bound = tokenOf(
      APPS,
      'trainer',
      '--audience',
      TOKEN_AUDIENCE,
      '--bound-object-kind',
      'Secret',
      '--bound-object-name',
      'bound-to',
      '--bound-object-uid',
      uid,
    );
    expect((await models(bound)).status).toBe(200);
    kubectlOk(['delete', 'secret', 'bound-to', '-n', APPS]);
    // Signature checks alone still take it (the token has not expired)...
    expect((await models(bound)).status).toBe(200);
    // ...TokenReview does not, once the IdentityProvider asks for it.
    applyObjects(provider('TokenReview'));
    await eventually('TokenReview refuses the token of the deleted object', 15_000, async () =>
      (await refusal(bound))[1] === 'token_rejected' ? true : undefined,
    );
    expect((await models(tokenOf(APPS, 'trainer', '--audience', TOKEN_AUDIENCE))).status).toBe(200);
    // Another audience is refused before the API server is asked.
    expect(await refusal(tokenOf(APPS, 'trainer'))).toEqual([401, 'wrong_audience']);
  });

  it('is Ready once the operator read its keys, and says why not otherwise', async () => {
    const ready = (name: string) => {
      const r = kubectl([
        'get',
        'identityprovider',
        name,
        '-n',
        NS,
        '-o',
        'jsonpath={.status.conditions[?(@.type=="Ready")]}',
      ]);
      return r.code === 0 && r.stdout ? (JSON.parse(r.stdout) as { status: string; reason: string }) : undefined;
    };
    await eventually('the cluster issuer is Ready', 15_000, () =>
      ready('cluster-workloads')?.status === 'True' ? true : undefined,
    );
    // A resync reuses the issuer's last reading: it reads the API server's discovery and keys
    // again only when its recheck is due (10 minutes), not at every reconcile.
    const before = await settledRequestCount(operator);
    operator.resyncAll();
    operator.resyncAll();
    await new Promise((r) => setTimeout(r, 1_500));
    expect(await operator.apiRequestCount()).toBe(before);
    applyObjects({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'IdentityProvider',
      metadata: { name: 'unreachable-sso', namespace: NS },
      spec: {
        issuer: 'http://127.0.0.1:9/realms/none',
        audiences: [TOKEN_AUDIENCE],
        profiles: [{ apiKey: 'no-such-key', claim: { name: 'groups', values: ['x'] } }],
      },
    });
    await eventually('the unreachable issuer is not Ready', 15_000, () =>
      ready('unreachable-sso')?.reason === 'DiscoveryFailed' ? true : undefined,
    );
  });
});
