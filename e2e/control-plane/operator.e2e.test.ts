import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ClusterInfo } from '../../crds/catalog/catalog.js';
import { Operator } from '../../operator/operator.js';
import { capturedLogger } from '../support/capture.js';
import { applyObjects, eventReasons, eventually, kubeConfig, kubectl, kubectlOk } from '../support/kube.js';
import { settledRequestCount } from '../support/operator-requests.js';

/**
 * The operator against the real control plane: the real scheduler places model servers on
 * kwok GPU nodes, the controller manager garbage-collects them, and the operator drives
 * ModelDeployments through Deploying -> Running / Failed.
 */

const NS = 'platform-llms';
const cluster: ClusterInfo = { organizationId: 'acme', clusterId: 'prod-1', cloud: 'aws', region: 'us-east-1' };
let skewMs = 0;
const now = () => new Date(Date.now() + skewMs);
// Operator logs go to the e2e capture (scanned for secrets), and to the console with E2E_DEBUG.
const quiet = capturedLogger('operator-e2e');

function startOperator(overrides: Partial<ClusterInfo> = {}, identity = 'op-1'): Promise<Operator> {
  const op = new Operator({
    kubeConfig: kubeConfig(),
    cluster: { ...cluster, ...overrides },
    images: { Ollama: 'ollama/ollama:test' },
    port: 0,
    now,
    resyncMs: 0,
    leaderElection: { namespace: 'platform-agent', name: 'operator-e2e', identity, leaseDurationMs: 3000 },
    logger: quiet,
  });
  return op.start().then(async () => {
    await eventually('leadership', 20_000, () => op.isLeader() || undefined);
    return op;
  });
}

function applyMd(name: string, spec: Record<string, unknown>): void {
  kubectlOk(
    ['apply', '-f', '-'],
    JSON.stringify({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ModelDeployment',
      metadata: { name, namespace: NS },
      spec,
    }),
  );
}

const mdField = (name: string, path: string) =>
  kubectlOk(['get', 'md', name, '-n', NS, '-o', `jsonpath=${path}`]).trim();

const phaseOf = (name: string) => mdField(name, '{.status.phase}');

function waitPhase(name: string, phase: string, timeoutMs = 60_000): Promise<string> {
  return eventually(`${name} ${phase}`, timeoutMs, () => (phaseOf(name) === phase ? phase : undefined));
}

const phasesSeen: string[] = [];

describe.runIf(inject('localControlPlane'))('operator on the real control plane', () => {
  let op: Operator;

  beforeAll(async () => {
    // A cluster whose unscheduled-pods policy is off, with another template enabled.
    applyObjects(
      {
        apiVersion: 'ai.platform/v1beta1',
        kind: 'AutoscalerPolicy',
        metadata: { name: 'cluster' },
        spec: { optimizationMode: 'Automated', unschedulablePods: { enabled: false } },
      },
      {
        apiVersion: 'ai.platform/v1beta1',
        kind: 'NodeTemplate',
        metadata: { name: 'batch' },
        spec: { enabled: true },
      },
    );
    op = await startOperator();
  });

  afterAll(async () => {
    await op?.stop();
    kubectl(['delete', 'md', '--all', '-n', NS]);
    // Garbage collection of the model servers can lag; free their GPUs for the suites after this one.
    kubectl(['delete', 'deploy,svc', '--all', '-n', NS]);
    kubectl(['delete', 'pods', '--all', '-n', NS, '--grace-period=0', '--force']);
    kubectl(['delete', 'nodetemplate', 'batch', 'llms-by-platform', '--ignore-not-found']);
    kubectl(['delete', 'autoscalerpolicy', 'cluster', '--ignore-not-found']);
    kubectl(['delete', 'lease', 'operator-e2e', '-n', 'platform-agent', '--ignore-not-found']);
  });

  it('deploys a model onto a GPU node that fits it and reports Running with the endpoint', async () => {
    const started = Date.now();
    applyMd('llama70', { model: 'llama3.1:70b', serviceName: 'llama70' });
    await eventually('Deploying', 20_000, () => {
      const p = phaseOf('llama70');
      if (p) phasesSeen.push(kubectlOk(['get', 'md', '-n', NS]));
      return p === 'Deploying' || p === 'Running' ? p : undefined;
    });
    await waitPhase('llama70', 'Running');
    const latency = Date.now() - started;
    console.log(`[e2e] apply -> Running: ${latency} ms`);
    phasesSeen.push(kubectlOk(['get', 'md', '-n', NS]));

    expect(mdField('llama70', '{.status.endpoint}')).toBe('http://llama70.platform-llms.svc.cluster.local:11434');
    const node = kubectlOk([
      'get',
      'pods',
      '-n',
      NS,
      '-l',
      'ai.platform/model-deployment=llama70',
      '-o',
      'jsonpath={.items[0].spec.nodeName}',
    ]);
    // 70b needs an A100 or larger: never the L4, the T4s or the arm64 T4G.
    expect(['gpu-a100-1', 'gpu-h100-1', 'arm-gh200-1']).toContain(node);
    const conditions = JSON.parse(mdField('llama70', '{.status.conditions}')) as Array<{
      type: string;
      status: string;
    }>;
    expect(Object.fromEntries(conditions.map((c) => [c.type, c.status]))).toMatchObject({
      Scheduled: 'True',
      ModelPulled: 'True',
      Ready: 'True',
    });
    // What `kubectl get md` showed while deploying and once running, kept in the CI log.
    console.log(`[e2e] kubectl get md -n ${NS}:\n${[...new Set(phasesSeen)].join('\n')}`);
    const header = phasesSeen.at(-1)?.split('\n')[0];
    expect(header?.split(/\s+/)).toEqual(['NAME', 'MODEL', 'ENGINE', 'STATUS', 'READY', 'DESIRED', 'ENDPOINT', 'AGE']);
  });

  it('owns the Deployment and Service, and records Events for the phases', async () => {
    const owner = kubectlOk([
      'get',
      'deploy',
      'llama70',
      '-n',
      NS,
      '-o',
      'jsonpath={.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}',
    ]);
    expect(owner).toBe('ModelDeployment/llama70');
    expect(kubectlOk(['get', 'svc', 'llama70', '-n', NS, '-o', 'jsonpath={.spec.ports[0].port}'])).toBe('11434');
    // Deploying too, unless the first status write already saw the server ready (kwok is fast);
    // the event follows the status write the test already saw.
    await eventually('Running event', 10_000, () =>
      eventReasons(NS, 'involvedObject.name=llama70').includes('Running') ? true : undefined,
    );
  });

  it('runs model servers under Pod Security restricted, which platform-llms enforces', () => {
    expect(
      kubectlOk(['get', 'ns', NS, '-o', 'jsonpath={.metadata.labels.pod-security\\.kubernetes\\.io/enforce}']),
    ).toBe('restricted');
    // The namespace really refuses what is not restricted...
    const refused = kubectl(['run', 'root-shell', '-n', NS, '--image=busybox', '--restart=Never']);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('violates PodSecurity "restricted');
    // ...and admitted the operator's model server.
    const pod = JSON.parse(
      kubectlOk(['get', 'pods', '-n', NS, '-l', 'ai.platform/model-deployment=llama70', '-o', 'json']),
    ) as { items: Array<{ spec: { securityContext: { runAsNonRoot: boolean; runAsUser: number } } }> };
    expect(pod.items.length).toBeGreaterThan(0);
    expect(pod.items[0]?.spec.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 10001 });
  });

  it('switched the unscheduled-pods policy on once, enabling only the LLM template', async () => {
    expect(kubectlOk(['get', 'autoscalerpolicy', 'cluster', '-o', 'jsonpath={.spec.unschedulablePods.enabled}'])).toBe(
      'true',
    );
    expect(kubectlOk(['get', 'nodetemplate', 'batch', '-o', 'jsonpath={.spec.enabled}'])).toBe('false');
    expect(kubectlOk(['get', 'nodetemplate', 'llms-by-platform', '-o', 'jsonpath={.spec.enabled}'])).toBe('true');
    // Policy already on: a second deployment touches no other template.
    kubectlOk(['patch', 'nodetemplate', 'batch', '--type=merge', '-p', '{"spec":{"enabled":true}}']);
    applyMd('qwen', { model: 'qwen2.5:0.5b', serviceName: 'qwen' });
    await waitPhase('qwen', 'Running');
    expect(kubectlOk(['get', 'nodetemplate', 'batch', '-o', 'jsonpath={.spec.enabled}'])).toBe('true');
  });

  it('changes nothing when reconciling a Running deployment again', async () => {
    const versions = () =>
      [
        kubectlOk(['get', 'md', 'qwen', '-n', NS, '-o', 'jsonpath={.metadata.resourceVersion}']),
        kubectlOk(['get', 'deploy', 'qwen', '-n', NS, '-o', 'jsonpath={.metadata.resourceVersion}']),
        kubectlOk(['get', 'svc', 'qwen', '-n', NS, '-o', 'jsonpath={.metadata.resourceVersion}']),
      ].join(',');
    // Let what the previous rollout set off settle first (its Events, the Deployment's replica
    // counts reaching status).
    const requests = await settledRequestCount(op);
    const before = versions();
    const metricsBefore = await (await fetch(`${op.metricsUrl()}/metrics`)).text();
    op.resyncAll();
    op.resyncAll();
    await new Promise((r) => setTimeout(r, 1500));
    expect(versions()).toBe(before);
    // Nothing to write: the two reconciles send no request at all.
    const after = await op.apiRequestCount();
    if (after !== requests) {
      const now = (await (await fetch(`${op.metricsUrl()}/metrics`)).text()).split('\n');
      const was = new Set(metricsBefore.split('\n'));
      console.log(
        `[e2e] requests during the resyncs:\n${now.filter((l) => l.startsWith('pao_operator_kube') && !was.has(l)).join('\n')}`,
      );
    }
    expect(after).toBe(requests);
  });

  it('rolls the model server when the model changes', async () => {
    applyMd('qwen', { model: 'qwen2.5:7b', serviceName: 'qwen' });
    await eventually('rollout to qwen2.5:7b', 30_000, () =>
      kubectlOk([
        'get',
        'deploy',
        'qwen',
        '-n',
        NS,
        '-o',
        'jsonpath={.spec.template.metadata.annotations.ai\\.platform/model}',
      ]) === 'qwen2.5:7b'
        ? true
        : undefined,
    );
    await eventually('Running on the new model', 60_000, () =>
      phaseOf('qwen') === 'Running' && mdField('qwen', '{.status.observedGeneration}') === '2' ? true : undefined,
    );
  });

  it('never uses the arm64 node whose GPU is below compute capability 8.0, and times out', async () => {
    const others = ['gpu-a100-1', 'gpu-h100-1', 'gpu-l4-1', 'arm-gh200-1'];
    kubectlOk(['cordon', ...others]);
    try {
      applyMd('small', { model: 'llama3.2:3b', serviceName: 'small' });
      const reason = await eventually('unschedulable', 30_000, () => {
        const r = kubectlOk([
          'get',
          'md',
          'small',
          '-n',
          NS,
          '-o',
          'jsonpath={.status.conditions[?(@.type=="Ready")].reason}',
        ]);
        return r === 'Unschedulable' ? r : undefined;
      });
      expect(reason).toBe('Unschedulable');
      // arm-t4g-1 has free GPUs and the template's taint, but compute capability 7.5 on arm64.
      expect(
        kubectlOk([
          'get',
          'pods',
          '-n',
          NS,
          '-l',
          'ai.platform/model-deployment=small',
          '-o',
          'jsonpath={.items[*].spec.nodeName}',
        ]),
      ).toBe('');
      skewMs = 26 * 60_000;
      op.resyncAll();
      await waitPhase('small', 'Failed', 20_000);
      expect(mdField('small', '{.status.conditions[?(@.type=="Ready")].reason}')).toBe('DeploymentTimeout');
      // Events follow the status writes and come back in any order within a second.
      const reasons = await eventually('timeout event', 10_000, () => {
        const r = eventReasons(NS, 'involvedObject.kind=ModelDeployment,involvedObject.name=small').sort();
        return r.includes('DeploymentTimeout') ? r : undefined;
      });
      expect(reasons).toEqual(['Deploying', 'DeploymentTimeout']);
    } finally {
      skewMs = 0;
      kubectlOk(['uncordon', ...others]);
    }
  });

  it('deleting a ModelDeployment garbage-collects its Deployment and Service', async () => {
    kubectlOk(['delete', 'md', 'small', '-n', NS]);
    await eventually('gc', 60_000, () => {
      const left = kubectl([
        'get',
        'deploy,svc',
        '-n',
        NS,
        '-l',
        'ai.platform/model-deployment=small',
        '-o',
        'name',
      ]).stdout.trim();
      return left === '' ? true : undefined;
    });
  });

  it('a new operator converges a deployment the previous one left mid-way', async () => {
    await op.stop();
    applyMd('resume', { model: 'phi3:mini', serviceName: 'resume' });
    // Nobody reconciles now: the object stays without status.
    await new Promise((r) => setTimeout(r, 1000));
    expect(phaseOf('resume')).toBe('');
    op = await startOperator({}, 'op-2');
    await waitPhase('resume', 'Running');
  });

  it('fails on an image the node cannot pull, and warns about missing GPU prerequisites', async () => {
    applyMd('pullfail', { model: 'mistral:7b', serviceName: 'pullfail' });
    const pod = await eventually(
      'pod created',
      30_000,
      () =>
        kubectlOk([
          'get',
          'pods',
          '-n',
          NS,
          '-l',
          'ai.platform/model-deployment=pullfail',
          '-o',
          'jsonpath={.items[0].metadata.name}',
        ]) || undefined,
    );
    // Play the kubelet: kwok leaves pods annotated with a custom status alone.
    kubectlOk(['annotate', 'pod', pod, '-n', NS, 'kwok.x-k8s.io/status=custom', '--overwrite']);
    const waiting = { reason: 'ErrImagePull', message: 'manifest unknown' };
    kubectlOk([
      'patch',
      'pod',
      pod,
      '-n',
      NS,
      '--subresource=status',
      '--type=merge',
      '-p',
      JSON.stringify({
        status: {
          phase: 'Pending',
          conditions: [{ type: 'Ready', status: 'False' }],
          containerStatuses: [
            {
              name: 'ollama',
              image: 'ollama/ollama:test',
              imageID: '',
              ready: false,
              restartCount: 0,
              state: { waiting },
            },
          ],
        },
      }),
    ]);
    await waitPhase('pullfail', 'Failed', 30_000);
    expect(mdField('pullfail', '{.status.conditions[?(@.type=="Ready")].reason}')).toBe('ImagePullFailed');
    await eventually('warning event', 10_000, () =>
      eventReasons(NS, 'involvedObject.name=pullfail,type=Warning').includes('ImagePullFailed') ? true : undefined,
    );
    // The kwok cluster runs no NVIDIA device plugin: every deployment says so.
    expect(mdField('pullfail', '{.status.conditions[?(@.type=="PrerequisitesMet")].reason}')).toBe(
      'DevicePluginNotFound',
    );
    kubectlOk(['delete', 'md', 'pullfail', '-n', NS, '--wait=false']);
  });

  it('lets only one of two replicas lead, and the other takes over when it leaves', async () => {
    const standby = await new Operator({
      kubeConfig: kubeConfig(),
      cluster,
      images: { Ollama: 'ollama/ollama:test' },
      port: 0,
      resyncMs: 0,
      leaderElection: { namespace: 'platform-agent', name: 'operator-e2e', identity: 'standby', leaseDurationMs: 3000 },
      logger: quiet,
    });
    await standby.start();
    try {
      await new Promise((r) => setTimeout(r, 3000));
      expect([op.isLeader(), standby.isLeader()]).toEqual([true, false]);
      expect((await fetch(`${standby.url()}/readyz`)).status).toBe(200);
      await op.stop();
      await eventually('standby leads', 20_000, () => standby.isLeader() || undefined);
      expect(
        kubectlOk(['get', 'lease', 'operator-e2e', '-n', 'platform-agent', '-o', 'jsonpath={.spec.holderIdentity}']),
      ).toBe('standby');
    } finally {
      await standby.stop();
      op = await startOperator({}, 'op-1b');
    }
  });

  it('serves the hosted-models list for this cluster and 404 for others', async () => {
    const res = await fetch(`${op.url()}/ai-optimizer/v1beta/organizations/acme/clusters/prod-1/hosted-models`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      region: string;
      items: Array<{ name: string; pricing: { usdPer1MTokens: number } }>;
    };
    expect(body.region).toBe('us-east-1');
    expect(body.items.map((m) => m.name)).toContain('llama3.1:70b');
    expect(body.items.every((m) => m.pricing.usdPer1MTokens > 0)).toBe(true);
    const other = await fetch(`${op.url()}/ai-optimizer/v1beta/organizations/acme/clusters/other/hosted-models`);
    expect(other.status).toBe(404);
    const metrics = await (await fetch(`${op.metricsUrl()}/metrics`)).text();
    // controller-runtime's names, per controller: stock operator dashboards read them.
    expect(metrics).toMatch(
      /controller_runtime_reconcile_total\{controller="modeldeployment",result="(success|requeue_after)"\} [1-9]/,
    );
    expect(metrics).toMatch(/controller_runtime_reconcile_time_seconds_count\{controller="modeldeployment"\} [1-9]/);
    expect(metrics).toMatch(/workqueue_adds_total\{name="modeldeployment",controller="modeldeployment"\} [1-9]/);
    expect(metrics).toMatch(/controller_runtime_max_concurrent_reconciles\{controller="externalprovider"\} 4/);
    // Metrics have their own port: the API port neither serves them nor names this cluster to strangers.
    expect((await fetch(`${op.url()}/metrics`)).status).toBe(404);
    expect(await other.text()).not.toContain('prod-1');
    expect((await fetch(`${op.url()}/readyz`)).status).toBe(200);
  });

  it('fails a 70b model on a cluster whose region has no A100-class GPU', async () => {
    await op.stop();
    op = await startOperator({ region: 'ap-south-1' }, 'op-3');
    applyMd('big', { model: 'llama3.1:70b', serviceName: 'big' });
    await waitPhase('big', 'Failed', 30_000);
    expect(mdField('big', '{.status.conditions[?(@.type=="Ready")].reason}')).toBe('ModelNotAvailable');
    expect(mdField('big', '{.status.conditions[?(@.type=="Ready")].message}')).toContain('region ap-south-1 offers');
    expect(kubectl(['get', 'deploy', 'big', '-n', NS]).code).not.toBe(0);
  });

  it("fails on GKE when the template's node image is not a GKE NVIDIA image", async () => {
    await op.stop();
    op = await startOperator({ cloud: 'gcp', region: 'us-central1' }, 'op-4');
    applyObjects(
      {
        apiVersion: 'ai.platform/v1beta1',
        kind: 'NodeConfiguration',
        metadata: { name: 'ubuntu-gpu' },
        spec: { image: 'ubuntu-2204-jammy-nvidia-custom', imageFamily: 'cos' },
      },
      {
        apiVersion: 'ai.platform/v1beta1',
        kind: 'NodeTemplate',
        metadata: { name: 'custom-gpu' },
        spec: { configurationRef: { name: 'ubuntu-gpu' } },
      },
    );
    try {
      applyMd('custom', { model: 'llama3.2:3b', serviceName: 'custom', nodeTemplate: 'custom-gpu' });
      await waitPhase('custom', 'Failed', 30_000);
      // Reconciled before its informer saw the template just applied, it is NodeTemplateNotFound
      // for a moment; the template's arrival requeues it.
      await eventually(
        'InvalidNodeConfiguration',
        30_000,
        () =>
          mdField('custom', '{.status.conditions[?(@.type=="Ready")].reason}') === 'InvalidNodeConfiguration' ||
          undefined,
      );
      expect(mdField('custom', '{.status.conditions[?(@.type=="Ready")].message}')).toMatch(
        /^finding GPU attached instance image for ubuntu-2204-jammy-nvidia-custom: /,
      );
      // Fixing the image lets the same deployment proceed.
      kubectlOk([
        'patch',
        'nodeconfiguration',
        'ubuntu-gpu',
        '--type=merge',
        '-p',
        '{"spec":{"image":"gke-1309-gke1046000-cos-113-18244-85-49-c-cgpv1-nvda"}}',
      ]);
      await eventually('no longer failed', 30_000, () => (phaseOf('custom') !== 'Failed' ? true : undefined));
    } finally {
      kubectl(['delete', 'md', 'custom', '-n', NS]);
      kubectl(['delete', 'nodetemplate', 'custom-gpu']);
      kubectl(['delete', 'nodeconfiguration', 'ubuntu-gpu']);
    }
  });
});
