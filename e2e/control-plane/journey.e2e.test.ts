import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { AwsCredentials } from '../../crds/providers/aws-credentials.js';
import { type ModelCacheSetting, parseModelCache } from '../../operator/model-deployment/model-cache.js';
import { Operator } from '../../operator/operator.js';
import { type AwsDouble, startAwsDouble } from '../doubles/aws.js';
import { type OllamaDouble, startOllamaDouble } from '../doubles/ollama.js';
import { type Postgres, startPostgres } from '../postgres/server.js';
import { capturedLogger } from '../support/capture.js';
import { startGateway, type TestGateway } from '../support/gateway.js';
import { JOURNEY_GATEWAY, PROMPT_CANARY, USER_ACCESS_KEY } from '../support/known-secrets.js';
import { adoptLlmsNamespace, eventually, helmOk, kubeConfig, kubectl, kubectlOk } from '../support/kube.js';

/**
 * The README's install path on the real control plane: helm install, then the operator and
 * the proxy run as local processes authenticated as the chart's ServiceAccounts (tokens from
 * the API server), so the chart's RBAC is what is exercised. A ModelDeployment becomes
 * Running on a kwok GPU node and is routed; a role-based ExternalProvider becomes Ready and
 * answers; tagged requests by X-API-Key and Bearer show up in usage; access-key providers
 * work only with the Secrets the chart lists (the ServiceAccounts can read no other Secret,
 * Helm's release record included); helm upgrade keeps the key and the data; helm uninstall
 * removes what it installed.
 */

const CHART = 'charts/platform-ai-optimizer';
const RELEASE = 'platform-ai-optimizer';
const GATEWAY: AwsCredentials = JOURNEY_GATEWAY;
const GATEWAY_ARN = 'arn:aws:iam::999999999999:role/gateway';
const ROLE = 'arn:aws:iam::123456789012:role/platform-ai-bedrock';
const HAIKU = 'anthropic.claude-3-haiku-20240307-v1:0';
const NOVA = 'amazon.nova-lite-v1:0';
const LLAMA = 'meta.llama3-1-8b-instruct-v1:0';

/** A kubeconfig for a ServiceAccount: the admin's cluster, the account's token. */
function serviceAccountConfig(name: string): KubeConfig {
  const token = kubectlOk(['create', 'token', name, '-n', 'platform-agent', '--duration=2h']).trim();
  const admin = kubeConfig();
  const cluster = admin.getCurrentCluster();
  if (!cluster) throw new Error('no cluster');
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'local', server: cluster.server, skipTLSVerify: true }],
    users: [{ name, token }],
    contexts: [{ name, cluster: 'local', user: name }],
    currentContext: name,
  });
  return kc;
}

/** The Admin key the chart's ApiKey got from the operator, as a user reads it from its Secret. */
const chartApiKey = () =>
  eventually('the Admin ApiKey issued', 20_000, () => {
    const res = kubectl([
      'get',
      'secret',
      'apikey-platform-admin',
      '-n',
      'platform-agent',
      '-o',
      'jsonpath={.data.key}',
    ]);
    return res.code === 0 && res.stdout ? Buffer.from(res.stdout, 'base64').toString('utf8') : undefined;
  });

/** What an install from before ApiKeys left behind: the generated key Secret (kept on upgrade). */
const LEGACY_KEY = 'sk-legacy-journey-key';

const installArgs = [
  CHART,
  '-n',
  'platform-agent',
  '--set',
  'image.repository=registry.local/platform-ai-optimizer',
  '--set',
  'cluster.organizationId=acme',
  '--set',
  'cluster.clusterId=prod-1',
  '--set',
  'cluster.region=us-east-1',
  '--set',
  'providerSecrets={journey-keys}',
  // The model cache is on by default; the class names the volume this test provides.
  '--set',
  'modelCache.storageClassName=journey-models',
];

/** The operator's model cache as the installed chart configures it, read as operator/main.ts reads it. */
function chartModelCache(): ModelCacheSetting {
  const env = JSON.parse(
    kubectlOk([
      'get',
      'deploy',
      'platform-ai-optimizer-operator',
      '-n',
      'platform-agent',
      '-o',
      'jsonpath={.spec.template.spec.containers[0].env}',
    ]),
  ) as Array<{ name: string; value?: string }>;
  const value = (name: string) => env.find((e) => e.name === name)?.value;
  return parseModelCache(
    value('MODEL_CACHE') ?? 'off',
    value('MODEL_CACHE_STORAGE_CLASS'),
    value('MODEL_CACHE_ACCESS_MODE'),
  );
}

let aws: AwsDouble;
let ollama: OllamaDouble;
let operator: Operator;
let app: TestGateway;
/** A proxy replica of the chart's, composed as proxy/main.ts composes it, over a given usage database. */
let replica: (usageDb: string) => Promise<TestGateway>;
let pg: Postgres | undefined;
let apiKey = '';
const quiet = capturedLogger('operator-journey');
const proxyLog = capturedLogger('proxy-journey');

describe.runIf(inject('localControlPlane'))('install journey', () => {
  beforeAll(async () => {
    adoptLlmsNamespace(RELEASE);
    kubectlOk([
      'create',
      'secret',
      'generic',
      'platform-ai-optimizer-api-keys',
      '-n',
      'platform-agent',
      `--from-literal=keys=${LEGACY_KEY}`,
    ]);
    helmOk('install', RELEASE, ...installArgs);
    // The test cluster has no provisioner: a static ReadWriteMany volume of the class the
    // release names binds the model cache's claim, as EFS or Filestore would.
    kubectlOk(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'PersistentVolume',
        metadata: { name: 'journey-models' },
        spec: {
          capacity: { storage: '10Gi' },
          accessModes: ['ReadWriteMany'],
          storageClassName: 'journey-models',
          persistentVolumeReclaimPolicy: 'Delete',
          hostPath: { path: '/tmp/journey-models', type: 'DirectoryOrCreate' },
        },
      }),
    );

    aws = await startAwsDouble({
      principals: [
        { ...GATEWAY, arn: GATEWAY_ARN, allow: ['sts:AssumeRole'], account: '999999999999' },
        {
          accessKeyId: USER_ACCESS_KEY.id,
          secretAccessKey: USER_ACCESS_KEY.secret,
          arn: 'arn:aws:iam::123456789012:user/bedrock',
          allow: ['bedrock:*'],
          account: '123456789012',
        },
      ],
      roles: [{ arn: ROLE, trusted: [GATEWAY_ARN], allow: ['bedrock:*'] }],
      models: {
        'us-east-1': [
          { modelId: HAIKU, providerName: 'Anthropic' },
          { modelId: NOVA, providerName: 'Amazon' },
          { modelId: LLAMA, providerName: 'Meta' },
        ],
      },
    });
    ollama = await startOllamaDouble({ models: ['qwen2.5:0.5b'] });

    operator = new Operator({
      kubeConfig: serviceAccountConfig('platform-ai-optimizer-operator'),
      cluster: { organizationId: 'acme', clusterId: 'prod-1', cloud: 'aws', region: 'us-east-1' },
      images: { Ollama: 'ollama/ollama:test' },
      port: 0,
      resyncMs: 0,
      leaderElection: { namespace: 'platform-agent', name: 'platform-ai-optimizer-operator', identity: 'journey' },
      logger: quiet,
      modelCache: chartModelCache(),
      aws: { base: async () => GATEWAY },
      providerEnv: { PAO_ENDPOINT_URL_BEDROCK: aws.url, PAO_ENDPOINT_URL_AWS_STS: aws.url },
    });
    await operator.start();
    await eventually('leader', 20_000, () => operator.isLeader() || undefined);
    apiKey = await chartApiKey();

    replica = (usageDb) =>
      startGateway(
        {
          source: { kind: 'cluster', kubeConfig: serviceAccountConfig('platform-ai-optimizer-proxy') },
          usage: { db: usageDb },
          aws: { base: async () => GATEWAY },
          env: { ...process.env, PAO_ENDPOINT_URL_BEDROCK_RUNTIME: aws.url, PAO_ENDPOINT_URL_AWS_STS: aws.url },
          logger: proxyLog,
        },
        {
          // The model server's pods (their EndpointSlice addresses, kwok's pod IPs) and its
          // Service's DNS name, resolved to the Ollama double here.
          resolveModelServer: (url) =>
            url === 'http://qwen.platform-llms.svc.cluster.local:11434' || /^http:\/\/[\d.]+:11434$/.test(url)
              ? ollama.url
              : url,
        },
      );
    app = await replica(join(mkdtempSync(join(tmpdir(), 'journey-')), 'usage.db'));
  }, 180_000);

  afterAll(async () => {
    await operator?.stop();
    await app?.stop();
    await aws?.close();
    await ollama?.close();
    await pg?.destroy();
    kubectl([
      'delete',
      'secret',
      'usage-db',
      'platform-ai-optimizer-api-keys',
      '-n',
      'platform-agent',
      '--ignore-not-found',
    ]);
    kubectl(['delete', 'md', 'qwen', '-n', 'platform-llms', '--ignore-not-found']);
    // What the operator created for the deployment: the template and the switched-on policy.
    kubectl(['delete', 'nodetemplate', 'llms-by-platform', '--ignore-not-found']);
    kubectl(['delete', 'autoscalerpolicy', 'cluster', '--ignore-not-found']);
    kubectl(['delete', 'deploy,svc', '--all', '-n', 'platform-llms']);
    kubectl(['delete', 'pvc', 'qwen-models', '-n', 'platform-llms', '--ignore-not-found', '--wait=false']);
    kubectl(['delete', 'pv', 'journey-models', '--ignore-not-found', '--wait=false']);
    kubectl([
      'delete',
      'externalproviders',
      'bedrock',
      'by-key',
      'unlisted',
      '-n',
      'platform-agent',
      '--ignore-not-found',
    ]);
    kubectl(['delete', 'secret', 'journey-keys', 'unlisted-keys', '-n', 'platform-agent', '--ignore-not-found']);
    spawnSync(inject('helm'), ['uninstall', RELEASE, '-n', 'platform-agent', '--kubeconfig', inject('kubeconfig')]);
  });

  const chat = (model: string, headers: Record<string, string>) =>
    app.request('/openai/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: `hello journey ${PROMPT_CANARY}` }] }),
    });

  it('installs the chart: workloads, Service :443, ServiceAccounts and an Admin ApiKey the operator issued', async () => {
    const names = kubectlOk([
      'get',
      'deploy,svc,sa,pdb',
      '-n',
      'platform-agent',
      '-l',
      `app.kubernetes.io/instance=${RELEASE}`,
      '-o',
      'name',
    ]);
    for (const n of [
      'deployment.apps/platform-ai-optimizer-operator',
      'deployment.apps/platform-ai-optimizer-proxy',
      'service/platform-ai-optimizer-proxy',
      'serviceaccount/platform-ai-optimizer-operator',
      'serviceaccount/platform-ai-optimizer-proxy',
      'poddisruptionbudget.policy/platform-ai-optimizer-proxy',
    ]) {
      expect(names).toContain(n);
    }
    expect(
      kubectlOk([
        'get',
        'svc',
        'platform-ai-optimizer-proxy',
        '-n',
        'platform-agent',
        '-o',
        'jsonpath={.spec.ports[0].port}',
      ]),
    ).toBe('443');
    expect(apiKey).toMatch(/^sk-[A-Za-z0-9_-]{43}$/);
    const status = JSON.parse(
      kubectlOk(['get', 'apikey', 'platform-admin', '-n', 'platform-agent', '-o', 'jsonpath={.status}']),
    ) as { digest: string; keyHint: string };
    expect(status.keyHint).toBe(`${apiKey.slice(0, 7)}...${apiKey.slice(-4)}`);
    expect(status.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(JSON.stringify(status)).not.toContain(apiKey);
    // The proxy authenticates it from the digest; the old install's key works until its Secret goes.
    await eventually(
      'the Admin key authenticates',
      10_000,
      async () =>
        (await app.request('/openai/v1/models', { headers: { 'x-api-key': apiKey } })).status === 200 || undefined,
    );
    expect((await app.request('/openai/v1/models', { headers: { 'x-api-key': LEGACY_KEY } })).status).toBe(200);
  });

  it('deploys a model as the operator ServiceAccount, and the proxy ServiceAccount routes to it', async () => {
    kubectlOk(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'ai.platform/v1beta1',
        kind: 'ModelDeployment',
        metadata: { name: 'qwen', namespace: 'platform-llms' },
        spec: { model: 'qwen2.5:0.5b', serviceName: 'qwen' },
      }),
    );
    await eventually('Running', 60_000, () =>
      kubectlOk(['get', 'md', 'qwen', '-n', 'platform-llms', '-o', 'jsonpath={.status.phase}']) === 'Running'
        ? true
        : undefined,
    );
    // With the chart's model cache: the operator's ServiceAccount created the claim, it bound, the pod mounts it.
    expect(
      kubectlOk([
        'get',
        'pvc',
        'qwen-models',
        '-n',
        'platform-llms',
        '-o',
        'jsonpath={.status.phase}/{.spec.volumeName}',
      ]),
    ).toBe('Bound/journey-models');
    expect(
      kubectlOk([
        'get',
        'pods',
        '-n',
        'platform-llms',
        '-l',
        'ai.platform/model-deployment=qwen',
        '-o',
        'jsonpath={.items[0].spec.volumes[?(@.name=="models")].persistentVolumeClaim.claimName}',
      ]),
    ).toBe('qwen-models');
    // Probe untagged: refused attempts are requests too, and would count against team:ml below.
    await eventually('routed', 20_000, async () =>
      (await chat('qwen2.5:0.5b', { 'x-api-key': apiKey })).status === 200 ? true : undefined,
    );
    const byKey = await chat('qwen2.5:0.5b', { 'x-api-key': apiKey, 'x-tags': 'team:ml,project:journey' });
    expect(byKey.status).toBe(200);
    expect(((await byKey.json()) as { object: string }).object).toBe('chat.completion');
    const byBearer = await chat('qwen2.5:0.5b', { authorization: `Bearer ${apiKey}`, 'x-tags': 'team:web' });
    expect(byBearer.status).toBe(200);
  });

  it('registers a role-based Bedrock provider and chats through it', async () => {
    kubectlOk(
      ['apply', '-f', '-'],
      JSON.stringify({
        apiVersion: 'ai.platform/v1beta1',
        kind: 'ExternalProvider',
        metadata: { name: 'bedrock', namespace: 'platform-agent' },
        spec: {
          provider: 'bedrock',
          displayName: 'Bedrock',
          region: 'us-east-1',
          auth: { method: 'IAMRole', roleArn: ROLE },
          models: [HAIKU],
        },
      }),
    );
    await eventually('Ready', 30_000, () =>
      kubectlOk(['get', 'externalproviders', 'bedrock', '-n', 'platform-agent', '-o', 'jsonpath={.status.phase}']) ===
      'Ready'
        ? true
        : undefined,
    );
    await eventually('bedrock routed', 20_000, async () =>
      (await chat(HAIKU, { 'x-api-key': apiKey })).status === 200 ? true : undefined,
    );
    const res = await chat(HAIKU, { 'x-api-key': apiKey, 'x-tags': 'team:ml' });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(8);
  });

  it('shows the traffic by tag in usage', async () => {
    // Records reach the store in the recorder's batches (every 250 ms).
    const byTeam = async () => {
      const res = await app.request('/v1/usage?groupBy=team', { headers: { 'x-api-key': apiKey } });
      const body = (await res.json()) as { groups: Array<{ group: string; requests: number }> };
      return body.groups.map((g) => [g.group, g.requests]);
    };
    await eventually('usage by team', 10_000, async () =>
      JSON.stringify(await byTeam()) ===
      JSON.stringify([
        ['ml', 2],
        ['web', 1],
      ])
        ? true
        : undefined,
    ).catch(() => {});
    expect(await byTeam()).toEqual([
      ['ml', 2],
      ['web', 1],
    ]);
  });

  it('reads only the provider Secrets the chart lists; a helm upgrade that lists one makes its provider work', async () => {
    for (const name of ['journey-keys', 'unlisted-keys']) {
      kubectlOk(
        ['apply', '-f', '-'],
        JSON.stringify({
          apiVersion: 'v1',
          kind: 'Secret',
          metadata: { name, namespace: 'platform-agent' },
          stringData: { accessKeyId: USER_ACCESS_KEY.id, secretAccessKey: USER_ACCESS_KEY.secret },
        }),
      );
    }
    const keyProvider = (name: string, secret: string, model: string) =>
      JSON.stringify({
        apiVersion: 'ai.platform/v1beta1',
        kind: 'ExternalProvider',
        metadata: { name, namespace: 'platform-agent' },
        spec: {
          provider: 'bedrock',
          displayName: name,
          region: 'us-east-1',
          auth: { method: 'AccessKey', secretRef: { name: secret } },
          models: [model],
        },
      });
    const status = (name: string) =>
      JSON.parse(kubectlOk(['get', 'externalproviders', name, '-n', 'platform-agent', '-o', 'json'])).status as {
        phase?: string;
        conditions?: Array<{ type: string; reason: string; message: string }>;
      };
    kubectlOk(['apply', '-f', '-'], keyProvider('by-key', 'journey-keys', NOVA));
    kubectlOk(['apply', '-f', '-'], keyProvider('unlisted', 'unlisted-keys', LLAMA));

    // Listed: the operator's ServiceAccount reads the key, discovery passes, the proxy's answers.
    await eventually('by-key Ready', 30_000, () => (status('by-key').phase === 'Ready' ? true : undefined));
    await eventually('key routed', 20_000, async () =>
      (await chat(NOVA, { 'x-api-key': apiKey })).status === 200 ? true : undefined,
    );

    // Not listed: RBAC refuses the watch; the status says how to grant it, naming no Secret.
    await eventually('unlisted Failed', 30_000, () => (status('unlisted').phase === 'Failed' ? true : undefined));
    const ready = status('unlisted').conditions?.find((c) => c.type === 'Ready');
    expect(ready?.reason).toBe('SecretNotReadable');
    expect(ready?.message).toContain('chart value providerSecrets');
    expect(JSON.stringify(status('unlisted'))).not.toContain('unlisted-keys');
    const refused = await chat(LLAMA, { 'x-api-key': apiKey });
    expect(refused.status).toBe(503);
    const error = ((await refused.json()) as { error: { code: string; message: string } }).error;
    expect(error.code).toBe('model_failed');
    expect(error.message).not.toContain('unlisted-keys');
    // Nor may either ServiceAccount read Helm's release record, which holds the rendered key.
    for (const sa of ['operator', 'proxy']) {
      const res = kubectl([
        'get',
        'secret',
        `sh.helm.release.v1.${RELEASE}.v1`,
        '-n',
        'platform-agent',
        '--as',
        `system:serviceaccount:platform-agent:platform-ai-optimizer-${sa}`,
      ]);
      expect(res.stderr).toContain('forbidden');
    }

    helmOk('upgrade', RELEASE, ...installArgs, '--set', 'providerSecrets={journey-keys,unlisted-keys}');
    // Both components retry the refused watch and pick the grant up without a restart.
    await eventually('unlisted Ready after the upgrade', 45_000, () =>
      status('unlisted').phase === 'Ready' ? true : undefined,
    );
    await eventually('unlisted routed', 20_000, async () =>
      (await chat(LLAMA, { 'x-api-key': apiKey })).status === 200 ? true : undefined,
    );
  }, 150_000);

  it('keeps the API key and the usage volume on helm upgrade', async () => {
    const pvc = kubectlOk([
      'get',
      'pvc',
      'platform-ai-optimizer-usage',
      '-n',
      'platform-agent',
      '-o',
      'jsonpath={.metadata.uid}',
    ]);
    helmOk('upgrade', RELEASE, ...installArgs, '--set', 'proxy.replicas=3');
    expect(await chartApiKey()).toBe(apiKey);
    expect(
      kubectlOk([
        'get',
        'pvc',
        'platform-ai-optimizer-usage',
        '-n',
        'platform-agent',
        '-o',
        'jsonpath={.metadata.uid}',
      ]),
    ).toBe(pvc);
    expect(
      kubectlOk([
        'get',
        'deploy',
        'platform-ai-optimizer-proxy',
        '-n',
        'platform-agent',
        '-o',
        'jsonpath={.spec.replicas}',
      ]),
    ).toBe('3');
  });

  it('switches usage to PostgreSQL by helm upgrade: the DSN from a Secret, replicas spread, one record for all', async () => {
    pg = await startPostgres();
    kubectlOk(['create', 'secret', 'generic', 'usage-db', '-n', 'platform-agent', `--from-literal=url=${pg.url}`]);
    helmOk(
      'upgrade',
      RELEASE,
      ...installArgs,
      '--set',
      'proxy.replicas=3',
      '--set',
      'usage.postgres.existingSecret=usage-db',
    );
    const deploy = JSON.parse(
      kubectlOk(['get', 'deploy', 'platform-ai-optimizer-proxy', '-n', 'platform-agent', '-o', 'json']),
    ) as {
      spec: {
        template: {
          spec: {
            topologySpreadConstraints?: unknown[];
            affinity?: unknown;
            volumes: Array<{ name: string }>;
            containers: Array<{
              env: Array<{ name: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }>;
            }>;
          };
        };
      };
    };
    const pod = deploy.spec.template.spec;
    expect(pod.topologySpreadConstraints).toHaveLength(1);
    expect(pod.affinity).toBeUndefined();
    expect(pod.volumes.map((v) => v.name)).not.toContain('usage');
    // What the kubelet hands each replica: the DSN from the Secret the Deployment names.
    const ref = pod.containers[0]?.env.find((e) => e.name === 'USAGE_DB')?.valueFrom?.secretKeyRef;
    expect(ref).toEqual({ name: 'usage-db', key: 'url' });
    const dsn = Buffer.from(
      kubectlOk(['get', 'secret', ref?.name ?? '', '-n', 'platform-agent', '-o', `jsonpath={.data.${ref?.key}}`]),
      'base64',
    ).toString('utf8');
    // Two replicas on it: requests through either land in one record, and either reports all.
    const replicas = [await replica(dsn), await replica(dsn)];
    for (let i = 0; i < 5; i++) {
      const through = replicas[i % 2];
      if (!through) throw new Error('no replica');
      const res = await through.request('/openai/v1/chat/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': apiKey, 'x-tags': 'team:pg' },
        body: JSON.stringify({ model: 'qwen2.5:0.5b', messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(res.status).toBe(200);
    }
    for (const r of replicas) await r.stack?.recorder.flush();
    for (const r of replicas) {
      const res = await r.request('/v1/usage?groupBy=team', { headers: { 'x-api-key': apiKey } });
      const body = (await res.json()) as { groups: Array<{ group: string; requests: number }> };
      expect(body.groups).toMatchObject([{ group: 'pg', requests: 5 }]);
    }
    for (const r of replicas) await r.stop();
  }, 120_000);

  it("retires the old install's key when its Secret is removed, within seconds", async () => {
    kubectlOk(['delete', 'secret', 'platform-ai-optimizer-api-keys', '-n', 'platform-agent']);
    await eventually(
      'the old key refused',
      10_000,
      async () =>
        (await app.request('/openai/v1/models', { headers: { 'x-api-key': LEGACY_KEY } })).status === 401 || undefined,
    );
    expect((await app.request('/openai/v1/models', { headers: { 'x-api-key': apiKey } })).status).toBe(200);
  });

  it('helm uninstall removes what it installed, keeping CRDs and the kept data', async () => {
    helmOk('uninstall', RELEASE, '-n', 'platform-agent', '--wait');
    const left = kubectl([
      'get',
      'deploy,svc,sa,pdb,role,rolebinding',
      '-n',
      'platform-agent',
      '-l',
      `app.kubernetes.io/instance=${RELEASE}`,
      '-o',
      'name',
    ]);
    expect(left.stdout.trim()).toBe('');
    expect(kubectl(['get', 'clusterrole', 'platform-ai-optimizer-operator']).code).not.toBe(0);
    expect(kubectlOk(['get', 'crd', 'modeldeployments.ai.platform', '-o', 'name']).trim()).toBe(
      'customresourcedefinition.apiextensions.k8s.io/modeldeployments.ai.platform',
    );
    // Marked helm.sh/resource-policy: keep: the usage history and the model namespace.
    expect(kubectl(['get', 'pvc', 'platform-ai-optimizer-usage', '-n', 'platform-agent']).code).toBe(0);
    // The Admin ApiKey went with the release, and its key Secret with it (owner reference).
    expect(kubectl(['get', 'apikey', 'platform-admin', '-n', 'platform-agent']).code).not.toBe(0);
    await eventually(
      'the key Secret collected',
      30_000,
      () => kubectl(['get', 'secret', 'apikey-platform-admin', '-n', 'platform-agent']).code !== 0 || undefined,
    );
  });
});
