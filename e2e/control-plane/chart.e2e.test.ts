import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import yaml from 'js-yaml';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { loadCatalog, resolveModel } from '../../crds/catalog/catalog.js';
import { LLMS_POD_SECURITY, MCP_SESSIONS_SECRET } from '../../crds/constants.js';
import { AUDIT_WEBHOOK_CONFIGURATION } from '../../operator/audit/audit-webhook.js';
import { WEBHOOK_TLS_SECRET } from '../../operator/audit/webhook-tls.js';
import { desiredModelServer } from '../../operator/model-deployment/model-server.js';
import { kubectl, kubectlOk } from '../support/kube.js';

/**
 * The Helm chart with the real helm (v4): lint, render with default and non-default values,
 * reject bad values through values.schema.json, validate every rendered object against the
 * real API server (server-side dry run), and check the RBAC it grants with kubectl auth can-i.
 */

const CHART = 'charts/platform-ai-optimizer';

function helm(args: string[]): { code: number; stdout: string; stderr: string } {
  const res = spawnSync(inject('helm'), args, { encoding: 'utf8', timeout: 60_000 });
  return { code: res.status ?? -1, stdout: res.stdout ?? '', stderr: res.stderr ?? '' };
}

interface Obj {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
  spec?: Record<string, unknown>;
}

function render(...set: string[]): Obj[] {
  const res = helm([
    'template',
    'platform-ai-optimizer',
    CHART,
    '-n',
    'platform-agent',
    ...set.flatMap((s) => ['--set', s]),
  ]);
  if (res.code !== 0) throw new Error(res.stderr);
  return (yaml.loadAll(res.stdout) as Array<Obj | null>).filter((o): o is Obj => o !== null);
}

interface PodTemplate {
  metadata: { labels: Record<string, string>; annotations?: Record<string, string> };
  spec: {
    priorityClassName?: string;
    topologySpreadConstraints?: unknown[];
    volumes: unknown[];
    containers: Array<{ image: string; env: unknown[]; volumeMounts: unknown[] }>;
  };
}

const find = (objs: Obj[], kind: string, name: string) => objs.find((o) => o.kind === kind && o.metadata.name === name);

afterAll(() => {
  kubectl(
    ['delete', '-f', '-', '--ignore-not-found'],
    render()
      .filter((o) => o.kind.startsWith('Role') || o.kind.startsWith('ClusterRole') || o.kind === 'ServiceAccount')
      .map((o) => JSON.stringify(o))
      .join('\n'),
  );
});

describe('Helm chart', () => {
  it('passes helm lint', () => {
    const res = helm(['lint', CHART]);
    expect(res.stdout + res.stderr).toContain('1 chart(s) linted, 0 chart(s) failed');
  });

  it('renders the gateway with its fixed names and a hardened proxy by default', () => {
    const objs = render();
    const svc = find(objs, 'Service', 'platform-ai-optimizer-proxy') as Obj & {
      spec: { ports: Array<{ port: number }> };
    };
    expect(svc.metadata.namespace).toBe('platform-agent');
    expect(svc.spec.ports[0]?.port).toBe(443);
    const proxy = find(objs, 'Deployment', 'platform-ai-optimizer-proxy') as Obj & {
      spec: {
        replicas: number;
        template: {
          spec: {
            securityContext: Record<string, unknown>;
            containers: Array<{
              securityContext: Record<string, unknown>;
              readinessProbe: unknown;
              resources: unknown;
            }>;
          };
        };
      };
    };
    expect(proxy.spec.replicas).toBe(2);
    expect(proxy.spec.template.spec.securityContext).toMatchObject({
      runAsNonRoot: true,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    expect(proxy.spec.template.spec.containers[0]?.securityContext).toMatchObject({
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
    });
    expect(proxy.spec.template.spec.containers[0]?.readinessProbe).toBeDefined();
    expect(find(objs, 'PodDisruptionBudget', 'platform-ai-optimizer-proxy')).toBeDefined();
    // The Admin key is an ApiKey the operator issues, not a Secret the chart generates.
    expect(find(objs, 'Secret', 'platform-ai-optimizer-api-keys')).toBeUndefined();
    expect(find(objs, 'ApiKey', 'platform-admin')).toMatchObject({
      metadata: { namespace: 'platform-agent' },
      spec: { team: 'platform', role: 'Admin', rotation: 0 },
    });
    expect(find(objs, 'PersistentVolumeClaim', 'platform-ai-optimizer-usage')).toBeDefined();
    expect(find(objs, 'Namespace', 'platform-llms')).toBeDefined();
    expect(objs.some((o) => o.kind === 'ServiceMonitor')).toBe(false);
    // Of the NetworkPolicies only the model servers' is on by default.
    expect(objs.filter((o) => o.kind === 'NetworkPolicy').map((o) => o.metadata.name)).toEqual([
      'platform-ai-optimizer-model-servers',
    ]);
  });

  it('labels platform-llms for Pod Security restricted, and admits only the proxy pods to the model servers', () => {
    const objs = render();
    const ns = find(objs, 'Namespace', 'platform-llms') as Obj & { metadata: { labels: Record<string, string> } };
    expect(ns.metadata.labels).toMatchObject(LLMS_POD_SECURITY);
    const policy = find(objs, 'NetworkPolicy', 'platform-ai-optimizer-model-servers') as Obj & {
      metadata: { namespace: string };
      spec: {
        podSelector: { matchLabels: Record<string, string> };
        ingress: Array<{
          from: Array<{
            namespaceSelector: { matchLabels: Record<string, string> };
            podSelector: { matchLabels: Record<string, string> };
          }>;
          ports: Array<{ port: number | string }>;
        }>;
      };
    };
    expect(policy.metadata.namespace).toBe('platform-llms');
    // The selectors must match what really runs: the operator's model-server pods of every engine
    // (the policy names their port, each engine's own number), the chart's proxy pods.
    for (const [engine, model] of [
      ['Ollama', 'llama3.1:8b'],
      ['VLLM', 'meta-llama/Llama-3.1-8B-Instruct'],
    ] as const) {
      const r = resolveModel(
        loadCatalog(),
        { organizationId: 'o', clusterId: 'c', cloud: 'aws', region: 'us-east-1' },
        model,
        engine,
      );
      if (!r.ok) throw new Error(r.message);
      const server = desiredModelServer(
        {
          apiVersion: 'ai.platform/v1beta1',
          kind: 'ModelDeployment',
          metadata: { name: 'm', namespace: 'platform-llms', uid: 'u' },
          spec: { engine, model, serviceName: 'm', port: 11434, replicas: 1 },
        },
        r.model,
        loadCatalog(),
        { image: 'i', template: 't', gpuTypes: r.gpuTypes },
      );
      expect(server.deployment.spec?.template.metadata?.labels).toMatchObject(policy.spec.podSelector.matchLabels);
      expect(server.deployment.spec?.template.spec?.containers[0]?.ports?.[0]?.name, engine).toBe(
        policy.spec.ingress[0]?.ports[0]?.port,
      );
    }
    const proxy = find(objs, 'Deployment', 'platform-ai-optimizer-proxy') as Obj & {
      spec: { template: { metadata: { labels: Record<string, string> } } };
    };
    const from = policy.spec.ingress[0]?.from[0];
    expect(proxy.spec.template.metadata.labels).toMatchObject(from?.podSelector.matchLabels ?? { missing: true });
    expect(from?.namespaceSelector.matchLabels).toEqual({ 'kubernetes.io/metadata.name': 'platform-agent' });
    expect(policy.spec.ingress).toHaveLength(1);
    expect(render('modelServers.networkPolicy.enabled=false').some((o) => o.kind === 'NetworkPolicy')).toBe(false);
  });

  it('grants no wildcard verbs or resources', () => {
    const rules = render()
      .filter((o) => o.kind === 'Role' || o.kind === 'ClusterRole')
      .flatMap(
        (o) => (o as Obj & { rules: Array<{ verbs: string[]; resources: string[]; apiGroups: string[] }> }).rules,
      );
    expect(rules.length).toBeGreaterThan(0);
    for (const r of rules) {
      expect([...r.verbs, ...r.resources, ...r.apiGroups]).not.toContain('*');
    }
  });

  it('renders the optional parts with non-default values', () => {
    const objs = render(
      'metrics.serviceMonitor.enabled=true',
      'metrics.grafanaDashboard.enabled=true',
      'networkPolicy.enabled=true',
      'apiKeys.existingSecret=my-keys',
      'usage.persistence.enabled=false',
      'proxy.replicas=3',
    );
    // Metrics are scraped from their own port and Services, never from the callers' Service.
    const monitor = find(objs, 'ServiceMonitor', 'platform-ai-optimizer') as Obj & {
      spec: { selector: { matchLabels: Record<string, string> }; endpoints: Array<{ port: string }> };
    };
    expect(monitor.spec.endpoints.map((e) => e.port)).toEqual(['metrics']);
    for (const name of ['platform-ai-optimizer-proxy-metrics', 'platform-ai-optimizer-operator-metrics']) {
      const svc = find(objs, 'Service', name) as Obj & {
        metadata: { labels: Record<string, string> };
        spec: { ports: Array<{ name: string; port: number }> };
      };
      expect(svc.spec.ports).toEqual([expect.objectContaining({ name: 'metrics', port: 9090 })]);
      expect(svc.metadata.labels).toMatchObject(monitor.spec.selector.matchLabels);
    }
    const callers = find(objs, 'Service', 'platform-ai-optimizer-proxy') as Obj & {
      metadata: { labels: Record<string, string> };
      spec: { ports: Array<{ name: string }> };
    };
    expect(callers.spec.ports.map((p) => p.name)).toEqual(['http']);
    expect(callers.metadata.labels['ai.platform/metrics']).toBeUndefined();
    const policy = find(objs, 'NetworkPolicy', 'platform-ai-optimizer-proxy') as Obj & {
      spec: {
        ingress: Array<{
          from: Array<{ namespaceSelector?: object; podSelector?: object }>;
          ports: Array<{ port: number }>;
        }>;
      };
    };
    expect(policy.spec.ingress.map((r) => r.ports.map((p) => p.port))).toEqual([[8080], [8080], [9090], [9090]]);
    // The other proxy replicas, which pass on a client's next request for an MCP call (proxy/mcp/replica-forward.ts),
    // and the operator, which sends its audit records (POST /v1/audit).
    expect(policy.spec.ingress[1]?.from).toEqual(
      ['proxy', 'operator'].map((component) => ({
        podSelector: {
          matchLabels: { 'app.kubernetes.io/instance': expect.any(String), 'app.kubernetes.io/component': component },
        },
      })),
    );
    // The operator's audit webhook: from anywhere unless networkPolicy.apiServerCidrs names the API server.
    type Ingress = { from?: Array<{ ipBlock?: { cidr: string } }>; ports: Array<{ port: number }> };
    const webhookRule = (o: Obj[]) =>
      (
        find(o, 'NetworkPolicy', 'platform-ai-optimizer-operator') as Obj & { spec: { ingress: Ingress[] } }
      ).spec.ingress.find((r) => r.ports.some((p) => p.port === 9443));
    expect(webhookRule(objs)?.from).toBeUndefined();
    expect(
      webhookRule(render('networkPolicy.enabled=true', 'networkPolicy.apiServerCidrs={10.0.0.0/24}'))?.from,
    ).toEqual([{ ipBlock: { cidr: '10.0.0.0/24' } }]);
    expect(policy.spec.ingress[2]?.from[0]?.namespaceSelector).toEqual({
      matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' },
    });
    // The operator's autoscaler reads the proxies' /load on the metrics port: its pods only.
    expect(policy.spec.ingress[3]?.from).toEqual([
      {
        podSelector: {
          matchLabels: { 'app.kubernetes.io/instance': expect.any(String), 'app.kubernetes.io/component': 'operator' },
        },
      },
    ]);
    const dashboard = find(objs, 'ConfigMap', 'platform-ai-optimizer-dashboard') as Obj & {
      data: Record<string, string>;
    };
    expect(JSON.parse(dashboard.data['platform-ai-optimizer.json'] ?? '{}').panels.length).toBeGreaterThan(0);
    expect(find(objs, 'NetworkPolicy', 'platform-ai-optimizer-proxy')).toBeDefined();
    expect(find(objs, 'Secret', 'platform-ai-optimizer-api-keys')).toBeUndefined();
    expect(find(objs, 'PersistentVolumeClaim', 'platform-ai-optimizer-usage')).toBeUndefined();
    expect(
      (find(objs, 'Deployment', 'platform-ai-optimizer-proxy') as Obj & { spec: { replicas: number } }).spec.replicas,
    ).toBe(3);
  });

  it.each([
    ['proxy.replicas=0'],
    ['cluster.cloud=oracle'],
    ['usage.persistence.size=lots'],
    ['apiKeys.existingSecret=Not_A_Name'],
    ['modelCache.accessMode=ReadOnlyMany'],
    ['modelCache.storageClassName=Not_A_Class'],
    ['unknownSetting=true'],
  ])('rejects %s through values.schema.json', (bad) => {
    const res = helm(['template', 'x', CHART, '-n', 'platform-agent', '--set', bad]);
    expect(res.code).not.toBe(0);
    expect(res.stderr).toContain("values don't meet the specifications of the schema");
  });

  it('with usage on PostgreSQL: the DSN from a Secret, no usage volume, replicas spread across nodes', () => {
    type Pod = {
      spec: {
        template: {
          spec: {
            affinity?: unknown;
            topologySpreadConstraints?: Array<{ topologyKey: string; maxSkew: number }>;
            volumes: Array<{ name: string }>;
            containers: Array<{
              env: Array<{
                name: string;
                value?: string;
                valueFrom?: { secretKeyRef?: { name: string; key: string } };
              }>;
              volumeMounts: Array<{ name: string }>;
            }>;
          };
        };
      };
    };
    const objs = render('usage.postgres.existingSecret=usage-db', 'proxy.replicas=3');
    const pod = (find(objs, 'Deployment', 'platform-ai-optimizer-proxy') as Obj & Pod).spec.template.spec;
    const env = pod.containers[0]?.env ?? [];
    expect(env.find((e) => e.name === 'USAGE_DB')).toEqual({
      name: 'USAGE_DB',
      valueFrom: { secretKeyRef: { name: 'usage-db', key: 'url' } },
    });
    // No usage volume; the usage spool on an emptyDir of each pod's own.
    expect(pod.volumes).toEqual([
      { name: 'usage-spool', emptyDir: {} },
      { name: 'tmp', emptyDir: {} },
    ]);
    expect(pod.containers[0]?.volumeMounts.map((v) => v.name)).toEqual(['usage-spool', 'tmp']);
    expect(env.find((e) => e.name === 'USAGE_SPOOL_DIR')).toEqual({
      name: 'USAGE_SPOOL_DIR',
      value: '/var/spool/platform-ai-optimizer',
    });
    expect(pod.affinity).toBeUndefined();
    expect(pod.topologySpreadConstraints).toMatchObject([{ topologyKey: 'kubernetes.io/hostname', maxSkew: 1 }]);
    expect(objs.some((o) => o.kind === 'PersistentVolumeClaim')).toBe(false);
    // A spool that survives node failures: one volume shared by the replicas, kept past the release.
    const shared = render('usage.postgres.existingSecret=usage-db', 'usage.spool.persistence.enabled=true');
    expect(find(shared, 'PersistentVolumeClaim', 'platform-ai-optimizer-usage-spool')).toMatchObject({
      metadata: { annotations: { 'helm.sh/resource-policy': 'keep' } },
      spec: { accessModes: ['ReadWriteMany'], resources: { requests: { storage: '2Gi' } } },
    });
    const sharedPod = (find(shared, 'Deployment', 'platform-ai-optimizer-proxy') as Obj & Pod).spec.template.spec;
    expect(sharedPod.volumes[0]).toEqual({
      name: 'usage-spool',
      persistentVolumeClaim: { claimName: 'platform-ai-optimizer-usage-spool' },
    });
    // ReadWriteOncePod is about the volume, which PostgreSQL mode does not have: any replica count.
    expect(
      render(
        'usage.postgres.existingSecret=usage-db',
        'usage.persistence.accessMode=ReadWriteOncePod',
        'proxy.replicas=3',
      ).length,
    ).toBeGreaterThan(0);
    const res = kubectl(
      ['apply', '--dry-run=server', '-f', '-'],
      JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objs }),
    );
    expect(res.stderr).not.toMatch(/error/i);
    expect(res.code).toBe(0);
  });

  it('keeps proxy replicas on the node of a ReadWriteOnce usage volume, and refuses ReadWriteOncePod with replicas', () => {
    type Spec = {
      spec: {
        template: {
          spec: {
            affinity?: {
              podAffinity?: { requiredDuringSchedulingIgnoredDuringExecution: Array<{ topologyKey: string }> };
            };
          };
        };
      };
    };
    const proxy = (objs: Obj[]) => find(objs, 'Deployment', 'platform-ai-optimizer-proxy') as Obj & Spec;
    const shared = proxy(render()).spec.template.spec.affinity?.podAffinity
      ?.requiredDuringSchedulingIgnoredDuringExecution;
    expect(shared?.map((t) => t.topologyKey)).toEqual(['kubernetes.io/hostname']);
    expect(proxy(render('usage.persistence.enabled=false')).spec.template.spec.affinity).toBeUndefined();
    const res = helm([
      'template',
      'x',
      CHART,
      '-n',
      'platform-agent',
      '--set',
      'usage.persistence.accessMode=ReadWriteOncePod',
    ]);
    expect(res.code).not.toBe(0);
    expect(res.stderr).toContain('ReadWriteOncePod admits one pod');
    expect(
      helm([
        'template',
        'x',
        CHART,
        '-n',
        'platform-agent',
        '--set',
        'usage.persistence.accessMode=ReadWriteOncePod',
        '--set',
        'proxy.replicas=1',
      ]).code,
    ).toBe(0);
  });

  it('turns the model cache on by default, with its class and access mode, and off on request', () => {
    type Env = Array<{ name: string; value?: string }>;
    const env = (objs: Obj[]) =>
      Object.fromEntries(
        (
          (
            find(objs, 'Deployment', 'platform-ai-optimizer-operator') as Obj & {
              spec: { template: { spec: { containers: Array<{ env: Env }> } } };
            }
          ).spec.template.spec.containers[0]?.env ?? []
        ).map((e) => [e.name, e.value]),
      );
    const defaults = env(render());
    expect(defaults).toMatchObject({ MODEL_CACHE: 'pvc', MODEL_CACHE_ACCESS_MODE: 'ReadWriteMany' });
    // No class named: the cluster's default class.
    expect(defaults.MODEL_CACHE_STORAGE_CLASS).toBeUndefined();
    expect(env(render('modelCache.storageClassName=efs-sc', 'modelCache.accessMode=ReadWriteOnce'))).toMatchObject({
      MODEL_CACHE: 'pvc',
      MODEL_CACHE_STORAGE_CLASS: 'efs-sc',
      MODEL_CACHE_ACCESS_MODE: 'ReadWriteOnce',
    });
    expect(env(render('modelCache.enabled=false')).MODEL_CACHE).toBe('off');
  });

  it('tells the proxy and the operator alike whether the routing scorer has its built-in embedding', () => {
    type Env = Array<{ name: string; value?: string }>;
    const switches = (objs: Obj[]) =>
      ['platform-ai-optimizer-proxy', 'platform-ai-optimizer-operator'].map(
        (name) =>
          (
            find(objs, 'Deployment', name) as Obj & {
              spec: { template: { spec: { containers: Array<{ env: Env }> } } };
            }
          ).spec.template.spec.containers[0]?.env.find((e) => e.name === 'ROUTING_BUILTIN_EMBEDDING')?.value,
      );
    expect(switches(render())).toEqual(['true', 'true']);
    expect(switches(render('routing.builtInEmbedding=false'))).toEqual(['false', 'false']);
  });

  it("gives the proxy MCP's allowed browser origins only when some are set (none by default)", () => {
    type Env = Array<{ name: string; value?: string }>;
    const origins = (objs: Obj[]) =>
      (
        find(objs, 'Deployment', 'platform-ai-optimizer-proxy') as Obj & {
          spec: { template: { spec: { containers: Array<{ env: Env }> } } };
        }
      ).spec.template.spec.containers[0]?.env.find((e) => e.name === 'GATEWAY_MCP_ALLOWED_ORIGINS')?.value;
    expect(origins(render())).toBeUndefined();
    expect(origins(render('proxy.mcp.allowedOrigins={https://tools.example.com,http://localhost:*}'))).toBe(
      'https://tools.example.com,http://localhost:*',
    );
  });

  it('tells each proxy replica its pod IP, where the others pass on an MCP call’s next request', () => {
    type Env = Array<{ name: string; valueFrom?: { fieldRef?: { fieldPath: string } } }>;
    const proxy = find(render(), 'Deployment', 'platform-ai-optimizer-proxy') as Obj & {
      spec: { template: { spec: { containers: Array<{ env: Env }> } } };
    };
    const env = proxy.spec.template.spec.containers[0]?.env ?? [];
    expect(env.find((e) => e.name === 'POD_IP')?.valueFrom?.fieldRef?.fieldPath).toBe('status.podIP');
  });

  it('takes the extension values users expect, on both components, and the API server accepts the result', () => {
    const dir = mkdtempSync(join(tmpdir(), 'chart-values-'));
    const file = join(dir, 'values.yaml');
    const extras = (component: string) => ({
      podLabels: { team: 'platform' },
      podAnnotations: { 'example.com/owner': 'platform' },
      extraEnv: [{ name: 'HTTPS_PROXY', value: 'http://egress:3128' }],
      extraVolumes: [{ name: 'corp-ca', configMap: { name: 'corp-ca' } }],
      extraVolumeMounts: [{ name: 'corp-ca', mountPath: '/etc/corp-ca', readOnly: true }],
      topologySpreadConstraints: [
        {
          maxSkew: 1,
          topologyKey: 'topology.kubernetes.io/zone',
          whenUnsatisfiable: 'ScheduleAnyway',
          labelSelector: { matchLabels: { 'app.kubernetes.io/component': component } },
        },
      ],
      priorityClassName: 'system-cluster-critical',
    });
    const digest = `sha256:${'ab'.repeat(32)}`;
    writeFileSync(
      file,
      yaml.dump({
        image: { digest },
        metrics: { serviceMonitor: { enabled: true, labels: { release: 'kube-prometheus-stack' } } },
        operator: extras('operator'),
        // Usage on PostgreSQL: the chart's own spread across nodes gives way to the user's.
        usage: { postgres: { existingSecret: 'usage-db' } },
        proxy: extras('proxy'),
      }),
    );
    const res = helm(['template', 'platform-ai-optimizer', CHART, '-n', 'platform-agent', '-f', file]);
    expect(res.stderr).not.toMatch(/error/i);
    const objs = (yaml.loadAll(res.stdout) as Array<Obj | null>).filter((o): o is Obj => o !== null);
    for (const name of ['platform-ai-optimizer-operator', 'platform-ai-optimizer-proxy']) {
      const component = name.endsWith('operator') ? 'operator' : 'proxy';
      const d = find(objs, 'Deployment', name) as Obj & { spec: { template: PodTemplate } };
      const pod = d.spec.template;
      expect(pod.metadata.labels).toMatchObject({
        team: 'platform',
        'app.kubernetes.io/name': 'platform-ai-optimizer',
        'app.kubernetes.io/version': expect.any(String),
      });
      expect(pod.metadata.annotations).toEqual({ 'example.com/owner': 'platform' });
      expect(pod.spec.priorityClassName).toBe('system-cluster-critical');
      expect(pod.spec.topologySpreadConstraints).toEqual(extras(component).topologySpreadConstraints);
      expect(pod.spec.volumes).toContainEqual({ name: 'corp-ca', configMap: { name: 'corp-ca' } });
      const c = pod.spec.containers[0];
      expect(c?.image).toBe(`ghcr.io/platform/platform-ai-optimizer@${digest}`);
      expect(c?.env).toContainEqual({ name: 'HTTPS_PROXY', value: 'http://egress:3128' });
      expect(c?.volumeMounts).toContainEqual({ name: 'corp-ca', mountPath: '/etc/corp-ca', readOnly: true });
    }
    expect(find(objs, 'ServiceMonitor', 'platform-ai-optimizer')?.metadata).toMatchObject({
      labels: expect.objectContaining({ release: 'kube-prometheus-stack' }),
    });
    // The operator gets a disruption budget too: one replica at a time.
    expect(find(objs, 'PodDisruptionBudget', 'platform-ai-optimizer-operator')).toMatchObject({
      spec: { maxUnavailable: 1 },
    });
    // The ServiceMonitor's CRD is not installed here; everything else must pass the API server.
    const list = JSON.stringify({
      apiVersion: 'v1',
      kind: 'List',
      items: objs.filter((o) => o.kind !== 'ServiceMonitor'),
    });
    const dry = kubectl(['apply', '--dry-run=server', '-f', '-'], list);
    expect(dry.stderr).not.toMatch(/error/i);
    expect(dry.code).toBe(0);
  });

  it("mounts each cloud's workload-identity token into both components when asked, and nothing by default", () => {
    const audience =
      'https://iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/clusters/providers/prod-1';
    const deployments = (objs: Obj[]) =>
      ['platform-ai-optimizer-operator', 'platform-ai-optimizer-proxy'].map(
        (name) => (find(objs, 'Deployment', name) as Obj & { spec: { template: PodTemplate } }).spec.template,
      );
    for (const pod of deployments(render())) {
      expect(JSON.stringify(pod)).not.toMatch(/identity-token|FEDERATED_TOKEN_FILE/);
    }
    const objs = render('workloadIdentity.azure.enabled=true', `workloadIdentity.google.audience=${audience}`);
    for (const pod of deployments(objs)) {
      const c = pod.spec.containers[0];
      expect(c?.env).toEqual(
        expect.arrayContaining([
          { name: 'AZURE_FEDERATED_TOKEN_FILE', value: '/var/run/secrets/azure/tokens/azure-identity-token' },
          { name: 'GOOGLE_FEDERATED_TOKEN_FILE', value: '/var/run/secrets/google/tokens/token' },
        ]),
      );
      expect(pod.spec.volumes).toEqual(
        expect.arrayContaining([
          {
            name: 'azure-identity-token',
            projected: {
              sources: [
                {
                  serviceAccountToken: {
                    path: 'azure-identity-token',
                    audience: 'api://AzureADTokenExchange',
                    expirationSeconds: 3600,
                  },
                },
              ],
            },
          },
          {
            name: 'google-identity-token',
            projected: { sources: [{ serviceAccountToken: { path: 'token', audience, expirationSeconds: 3600 } }] },
          },
        ]),
      );
      expect(c?.volumeMounts).toEqual(
        expect.arrayContaining([
          { name: 'azure-identity-token', mountPath: '/var/run/secrets/azure/tokens', readOnly: true },
          { name: 'google-identity-token', mountPath: '/var/run/secrets/google/tokens', readOnly: true },
        ]),
      );
    }
    const list = JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objs });
    expect(kubectl(['apply', '--dry-run=server', '-f', '-'], list).code).toBe(0);
    // An audience that is not a pool provider is refused by the values schema.
    expect(
      helm(['template', 'x', CHART, '-n', 'platform-agent', '--set', 'workloadIdentity.google.audience=sts']).code,
    ).not.toBe(0);
  });

  it('refuses a namespace other than platform-agent', () => {
    const res = helm(['template', 'x', CHART, '-n', 'default']);
    expect(res.code).not.toBe(0);
    expect(res.stderr).toContain('install this chart into the namespace platform-agent');
  });

  it('validates every rendered object against the API server (server-side dry run)', () => {
    for (const objs of [render(), render('networkPolicy.enabled=true', 'metrics.grafanaDashboard.enabled=true')]) {
      const list = JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objs });
      const res = kubectl(['apply', '--dry-run=server', '-f', '-'], list);
      // kubectl warns about the pre-existing platform-llms namespace; anything else would be an error.
      expect(res.stderr).not.toMatch(/error/i);
      expect(res.code).toBe(0);
      expect(res.stdout.trim().split('\n')).toHaveLength(objs.length);
    }
  });

  it('shares rate limits through Redis when given its Secret, the URL never in the pod spec', () => {
    type Env = Array<{ name: string; value?: string; valueFrom?: unknown }>;
    const env = (objs: Obj[]) =>
      (
        find(objs, 'Deployment', 'platform-ai-optimizer-proxy') as Obj & {
          spec: { template: { spec: { containers: Array<{ env: Env }> } } };
        }
      ).spec.template.spec.containers[0]?.env ?? [];
    expect(env(render()).find((e) => e.name === 'GATEWAY_REDIS_URL')).toBeUndefined();
    expect(env(render('redis.existingSecret=gateway-redis')).find((e) => e.name === 'GATEWAY_REDIS_URL')).toEqual({
      name: 'GATEWAY_REDIS_URL',
      valueFrom: { secretKeyRef: { name: 'gateway-redis', key: 'url' } },
    });
  });

  it('renders the same objects every time (GitOps: no generated key, no lookup)', () => {
    expect(JSON.stringify(render())).toBe(JSON.stringify(render()));
    expect(JSON.stringify(render('usage.postgres.existingSecret=usage-db'))).toBe(
      JSON.stringify(render('usage.postgres.existingSecret=usage-db')),
    );
  });

  it('grants no Secret read without listed provider Secrets (an empty resourceNames would grant every one)', () => {
    type Role = Obj & { rules: Array<{ resources: string[]; resourceNames?: string[]; verbs: string[] }> };
    const secretRules = (objs: Obj[], name: string) =>
      (objs.filter((o) => o.kind === 'Role' && o.metadata.name === name) as Role[])
        .flatMap((r) => r.rules)
        .filter((r) => r.resources.includes('secrets'));
    // The operator writes ApiKeys' Secrets with verbs that return no data, and reads only its own
    // audit webhook's certificate, by name.
    expect(secretRules(render(), 'platform-ai-optimizer-operator')).toEqual([
      { apiGroups: [''], resources: ['secrets'], verbs: ['create', 'delete'] },
      { apiGroups: [''], resources: ['secrets'], resourceNames: [WEBHOOK_TLS_SECRET], verbs: ['get'] },
    ]);
    // The proxy: its keys' Secret and the key MCP sessions are sealed with (the operator makes it).
    for (const rule of secretRules(render(), 'platform-ai-optimizer-proxy')) {
      expect(rule.resourceNames).toEqual(['platform-ai-optimizer-api-keys', MCP_SESSIONS_SECRET]);
    }
    // Keys the user manages: the proxy is told the Secret's name and may read only that one.
    const own = render('apiKeys.existingSecret=team-keys');
    expect(secretRules(own, 'platform-ai-optimizer-proxy').flatMap((r) => r.resourceNames)).toEqual([
      'team-keys',
      MCP_SESSIONS_SECRET,
    ]);
    const proxy = find(own, 'Deployment', 'platform-ai-optimizer-proxy') as Obj & {
      spec: { template: { spec: { containers: Array<{ env: Array<{ name: string; value: string }> }> } } };
    };
    expect(proxy.spec.template.spec.containers[0]?.env).toContainEqual({
      name: 'GATEWAY_API_KEYS_SECRET',
      value: 'team-keys',
    });
  });

  it("grants the ServiceAccounts what they need and nothing they don't (kubectl auth can-i)", () => {
    const rbac = render('providerSecrets={bedrock-keys}').filter((o) =>
      ['ServiceAccount', 'Role', 'RoleBinding', 'ClusterRole', 'ClusterRoleBinding'].includes(o.kind),
    );
    kubectlOk(['apply', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'List', items: rbac }));
    const can = (sa: string, ...args: string[]) =>
      kubectl([
        'auth',
        'can-i',
        '--as',
        `system:serviceaccount:platform-agent:platform-ai-optimizer-${sa}`,
        ...args,
      ]).stdout.trim();
    expect(
      can('operator', 'patch', 'modeldeployments.ai.platform', '--subresource=status', '-n', 'platform-llms'),
    ).toBe('yes');
    expect(can('operator', 'create', 'deployments.apps', '-n', 'platform-llms')).toBe('yes');
    expect(can('operator', 'update', 'leases.coordination.k8s.io', '-n', 'platform-agent')).toBe('yes');
    expect(can('operator', 'create', 'deployments.apps', '-n', 'default')).toBe('no');
    // Owner references with blockOwnerDeletion (OwnerReferencesPermissionEnforcement), in platform-llms only.
    expect(
      can('operator', 'update', 'modeldeployments.ai.platform', '--subresource=finalizers', '-n', 'platform-llms'),
    ).toBe('yes');
    expect(can('operator', 'update', 'modeldeployments.ai.platform', '-n', 'platform-llms')).toBe('no');
    // The autoscaler: replicas through the scale subresource, the proxy replicas from their EndpointSlices.
    expect(can('operator', 'patch', 'modeldeployments.ai.platform', '--subresource=scale', '-n', 'platform-llms')).toBe(
      'yes',
    );
    expect(can('operator', 'list', 'endpointslices.discovery.k8s.io', '-n', 'platform-agent')).toBe('yes');
    // The model cache's claims: made and grown in platform-llms, deleted only by garbage collection.
    for (const verb of ['get', 'list', 'watch', 'create', 'patch']) {
      expect(can('operator', verb, 'persistentvolumeclaims', '-n', 'platform-llms'), `operator ${verb} pvc`).toBe(
        'yes',
      );
    }
    expect(can('operator', 'delete', 'persistentvolumeclaims', '-n', 'platform-llms')).toBe('no');
    expect(can('operator', 'create', 'persistentvolumeclaims', '-n', 'platform-agent')).toBe('no');
    expect(can('operator', 'create', 'persistentvolumes')).toBe('no');
    // ApiKeys' Secrets: written by create and delete (neither answers with the data), never read.
    expect(can('operator', 'create', 'secrets', '-n', 'platform-agent')).toBe('yes');
    expect(can('operator', 'delete', 'secrets', '-n', 'platform-agent')).toBe('yes');
    for (const verb of ['patch', 'update']) {
      expect(can('operator', verb, 'secrets', '-n', 'platform-agent'), `operator ${verb}`).toBe('no');
    }
    expect(can('operator', 'create', 'secrets', '-n', 'default')).toBe('no');
    expect(can('operator', 'get', 'secrets', '-n', 'kube-system')).toBe('no');
    // The audit webhook's configuration, by name only: patched, and watched (list and watch with
    // metadata.name's field selector, which the API server authorizes against the name).
    const config = `validatingwebhookconfigurations.admissionregistration.k8s.io/${AUDIT_WEBHOOK_CONFIGURATION}`;
    for (const verb of ['get', 'list', 'watch', 'patch']) {
      expect(can('operator', verb, config), `operator ${verb} the audit configuration`).toBe('yes');
    }
    expect(can('operator', 'list', 'validatingwebhookconfigurations.admissionregistration.k8s.io')).toBe('no');
    expect(can('operator', 'delete', config)).toBe('no');
    const named = kubectl([
      'get',
      'validatingwebhookconfigurations',
      '--field-selector',
      `metadata.name=${AUDIT_WEBHOOK_CONFIGURATION}`,
      '--as',
      'system:serviceaccount:platform-agent:platform-ai-optimizer-operator',
    ]);
    expect(named.stderr).not.toMatch(/forbidden/i);
    expect(named.code).toBe(0);
    expect(can('operator', 'patch', 'apikeys.ai.platform', '--subresource=status', '-n', 'platform-agent')).toBe('yes');
    // The proxy authenticates from ApiKeys' digests and reports spend; it never reads their Secrets.
    expect(can('proxy', 'watch', 'apikeys.ai.platform', '-n', 'platform-agent')).toBe('yes');
    expect(can('proxy', 'patch', 'apikeys.ai.platform', '--subresource=status', '-n', 'platform-agent')).toBe('yes');
    expect(can('proxy', 'patch', 'budgets.ai.platform', '--subresource=status', '-n', 'platform-agent')).toBe('yes');
    expect(can('proxy', 'patch', 'apikeys.ai.platform', '-n', 'platform-agent')).toBe('no');
    expect(can('proxy', 'get', 'secrets/apikey-platform-admin', '-n', 'platform-agent')).toBe('no');
    expect(can('proxy', 'list', 'modeldeployments.ai.platform', '-n', 'platform-llms')).toBe('yes');
    // A request wakes a hibernated model through the scale subresource, and nothing else of its spec.
    expect(can('proxy', 'get', 'modeldeployments.ai.platform', '--subresource=scale', '-n', 'platform-llms')).toBe(
      'yes',
    );
    expect(can('proxy', 'patch', 'modeldeployments.ai.platform', '--subresource=scale', '-n', 'platform-llms')).toBe(
      'yes',
    );
    expect(can('proxy', 'patch', 'modeldeployments.ai.platform', '-n', 'platform-llms')).toBe('no');
    expect(can('proxy', 'watch', 'endpointslices.discovery.k8s.io', '-n', 'platform-llms')).toBe('yes');
    expect(can('proxy', 'watch', 'endpointslices.discovery.k8s.io', '-n', 'platform-agent')).toBe('no');
    // Secrets by name only: the API-key Secret (proxy) and the listed provider Secrets (both),
    // never the namespace's others, Helm's release record (it holds the rendered key) included.
    const helmRecord = 'secrets/sh.helm.release.v1.platform-ai-optimizer.v1';
    for (const sa of ['proxy', 'operator']) {
      for (const verb of ['get', 'list', 'watch']) {
        expect(can(sa, verb, 'secrets/bedrock-keys', '-n', 'platform-agent'), `${sa} ${verb}`).toBe('yes');
        expect(can(sa, verb, helmRecord, '-n', 'platform-agent'), `${sa} ${verb} helm record`).toBe('no');
        expect(can(sa, verb, 'secrets', '-n', 'platform-agent'), `${sa} ${verb} all Secrets`).toBe('no');
      }
    }
    expect(can('proxy', 'watch', 'secrets/platform-ai-optimizer-api-keys', '-n', 'platform-agent')).toBe('yes');
    expect(can('operator', 'get', 'secrets/platform-ai-optimizer-api-keys', '-n', 'platform-agent')).toBe('no');
    // The key MCP sessions are sealed with: made by the operator (create, never read), watched by the proxy.
    expect(can('proxy', 'watch', `secrets/${MCP_SESSIONS_SECRET}`, '-n', 'platform-agent')).toBe('yes');
    expect(can('operator', 'get', `secrets/${MCP_SESSIONS_SECRET}`, '-n', 'platform-agent')).toBe('no');
    // McpServers: the operator lists their tools into status and runs stdio ones' bridges; the proxy reads them.
    expect(can('operator', 'patch', 'mcpservers.ai.platform', '--subresource=status', '-n', 'platform-agent')).toBe(
      'yes',
    );
    expect(can('operator', 'create', 'deployments.apps', '-n', 'platform-agent')).toBe('yes');
    expect(can('proxy', 'watch', 'mcpservers.ai.platform', '-n', 'platform-agent')).toBe('yes');
    expect(can('proxy', 'patch', 'mcpservers.ai.platform', '-n', 'platform-agent')).toBe('no');
    expect(can('proxy', 'get', 'configmaps/platform-ai-optimizer-prices', '-n', 'platform-agent')).toBe('yes');
    // RoutingPolicies: the operator resolves their pools into status; the proxy reads them and
    // watches their examples' ConfigMaps by label, which RBAC cannot narrow: it may list and watch
    // platform-agent's ConfigMaps (never its Secrets), get only the prices by name.
    expect(
      can('operator', 'patch', 'routingpolicies.ai.platform', '--subresource=status', '-n', 'platform-agent'),
    ).toBe('yes');
    expect(can('proxy', 'watch', 'routingpolicies.ai.platform', '-n', 'platform-agent')).toBe('yes');
    expect(can('proxy', 'patch', 'routingpolicies.ai.platform', '-n', 'platform-agent')).toBe('no');
    expect(can('proxy', 'watch', 'configmaps', '-n', 'platform-agent')).toBe('yes');
    // Guardrails: the operator writes their detectors' readiness; the proxy reads them, changes none.
    expect(can('operator', 'patch', 'guardrails.ai.platform', '--subresource=status', '-n', 'platform-agent')).toBe(
      'yes',
    );
    expect(can('proxy', 'watch', 'guardrails.ai.platform', '-n', 'platform-agent')).toBe('yes');
    expect(can('proxy', 'patch', 'guardrails.ai.platform', '-n', 'platform-agent')).toBe('no');
    // IdentityProviders: the operator writes Ready; the proxy reads them and may ask TokenReview
    // (the built-in system:auth-delegator), but may not change them.
    expect(
      can('operator', 'patch', 'identityproviders.ai.platform', '--subresource=status', '-n', 'platform-agent'),
    ).toBe('yes');
    expect(can('proxy', 'watch', 'identityproviders.ai.platform', '-n', 'platform-agent')).toBe('yes');
    expect(can('proxy', 'patch', 'identityproviders.ai.platform', '-n', 'platform-agent')).toBe('no');
    expect(can('proxy', 'create', 'tokenreviews.authentication.k8s.io')).toBe('yes');
    expect(can('proxy', 'get', 'configmaps/kube-root-ca.crt', '-n', 'platform-agent')).toBe('no');
    expect(can('proxy', 'list', 'configmaps', '-n', 'platform-llms')).toBe('no');
    expect(can('proxy', 'get', 'secrets', '-n', 'platform-llms')).toBe('no');
    expect(can('proxy', 'patch', 'modeldeployments.ai.platform', '--subresource=status', '-n', 'platform-llms')).toBe(
      'no',
    );
    expect(can('proxy', 'create', 'pods', '-n', 'platform-agent')).toBe('no');
  });
});
