import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Operator } from '../../operator/operator.js';
import { capturedLogger } from '../support/capture.js';
import { applyObjects, eventReasons, eventually, kubeConfig, kubectl, kubectlOk } from '../support/kube.js';

/**
 * The shipped default RoutingPolicy (crds/examples/routingpolicy.yaml) on the real control plane
 * with the operator: ModelsMissing while nothing serves its pool, Ready once a ModelDeployment and
 * two ExternalProviders serve it, with each model's price in status and an Event per transition;
 * a ConfigMap of examples it names is looked for by its label; the Scorer condition says what
 * judges difficulty, FeaturesOnly (with the fix) when the proxies run without the built-in embedding.
 */

const NS = 'platform-agent';
const OPENAI = 'rp-e2e-openai';
const ANTHROPIC = 'rp-e2e-anthropic';
const LLAMA = 'rp-e2e-llama32';

let operator: Operator;

const field = (name: string, path: string) =>
  kubectlOk(['get', 'routingpolicies', name, '-n', NS, '-o', `jsonpath=${path}`]);
const ready = (name: string) =>
  `${field(name, '{.status.conditions[?(@.type=="Ready")].status}')}/${field(name, '{.status.conditions[?(@.type=="Ready")].reason}')}`;
const condition = (name: string, type: string) =>
  `${field(name, `{.status.conditions[?(@.type=="${type}")].status}`)}/${field(name, `{.status.conditions[?(@.type=="${type}")].reason}`)}`;
const untilReady = (name: string, want: string) =>
  eventually(`${name} ${want}`, 60_000, () => (ready(name) === want ? want : undefined));
const reasonsOf = (name: string) => eventReasons(NS, `involvedObject.kind=RoutingPolicy,involvedObject.name=${name}`);

const provider = (name: string, type: string, models: string[]) => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ExternalProvider',
  metadata: { name, namespace: NS },
  // Never called here: the pool needs only spec.models and the price table.
  spec: { provider: type, displayName: name, auth: { method: 'APIKey', secretRef: { name: `${name}-key` } }, models },
});

const options = () => ({
  kubeConfig: kubeConfig(),
  cluster: { organizationId: 'acme', clusterId: 'prod-1', cloud: 'aws' as const, region: 'us-east-1' },
  images: { Ollama: 'ollama/ollama:test' },
  port: 0,
  resyncMs: 0,
  leaderElection: false as const,
  logger: capturedLogger('operator-routing-policies'),
});

beforeAll(async () => {
  operator = new Operator(options());
  await operator.start();
});

afterAll(async () => {
  await operator?.stop();
  kubectl(['delete', 'routingpolicies', 'default', 'semantic-e2e', '-n', NS, '--ignore-not-found', '--wait=false']);
  kubectl(['delete', 'externalproviders', OPENAI, ANTHROPIC, '-n', NS, '--ignore-not-found', '--wait=false']);
  kubectl(['delete', 'modeldeployments', LLAMA, '-n', 'platform-llms', '--ignore-not-found', '--wait=false']);
  kubectl(['delete', 'configmap', 'rp-e2e-examples', '-n', NS, '--ignore-not-found']);
});

describe('RoutingPolicy with the operator on the real control plane', () => {
  it('resolves the example pool once something serves it, and says what is missing until then', async () => {
    kubectlOk(['apply', '-f', 'crds/examples/routingpolicy.yaml']);
    await eventually('ModelsMissing naming the hosted models', 60_000, () => {
      const message = field('default', '{.status.conditions[?(@.type=="Ready")].message}');
      return ready('default') === 'False/ModelsMissing' && /gpt-4o-mini, claude-sonnet-5-5/.test(message)
        ? message
        : undefined;
    });
    expect(field('default', '{.status.observedGeneration}')).toBe(field('default', '{.metadata.generation}'));

    applyObjects(
      {
        apiVersion: 'ai.platform/v1beta1',
        kind: 'ModelDeployment',
        metadata: { name: LLAMA, namespace: 'platform-llms' },
        spec: { model: 'llama3.2:3b', serviceName: LLAMA },
      },
      provider(OPENAI, 'openai', ['gpt-4o-mini']),
      provider(ANTHROPIC, 'anthropic', ['claude-sonnet-5-5']),
    );
    await untilReady('default', 'True/Resolved');
    expect(condition('default', 'Scorer')).toBe('True/BuiltInEmbedding');
    const models = JSON.parse(field('default', '{.status.models}')) as Array<Record<string, unknown>>;
    expect(models.map((m) => [m.name, m.tier, m.problem])).toEqual([
      ['llama3.2:3b', 'Light', undefined],
      ['gpt-4o-mini', 'Standard', undefined],
      ['claude-sonnet-5-5', 'Frontier', undefined],
    ]);
    expect(models.slice(1).map((m) => [m.inputPerMillion, m.outputPerMillion])).toEqual([
      [0.15, 0.6],
      [2, 10],
    ]);
    expect(models[0]?.inputPerMillion).toBeGreaterThan(0);
    // The Event follows the status write.
    await eventually('an Event per transition', 10_000, () =>
      ['ModelsMissing', 'Resolved'].every((r) => reasonsOf('default').includes(r)) ? true : undefined,
    );
    console.log(`[e2e] kubectl get rp:\n${kubectlOk(['get', 'rp', '-n', NS])}`);
  });

  it('looks for a ConfigMap of examples by its label', async () => {
    applyObjects({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'RoutingPolicy',
      metadata: { name: 'semantic-e2e', namespace: NS },
      spec: {
        models: [{ name: 'gpt-4o-mini', tier: 'Standard' }],
        scorer: {
          semantic: {
            embeddingModel: 'gpt-4o-mini',
            examplesFrom: { configMapName: 'rp-e2e-examples', key: 'examples.yaml' },
          },
        },
      },
    });
    await untilReady('semantic-e2e', 'False/ExamplesMissing');
    const examples = {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'rp-e2e-examples', namespace: NS },
      data: { 'examples.yaml': '- {tier: Standard, prompt: summarise this}\n' },
    };
    applyObjects(examples);
    // Without the label the ConfigMap is not read: still missing.
    await new Promise((r) => setTimeout(r, 2000));
    expect(ready('semantic-e2e')).toBe('False/ExamplesMissing');
    applyObjects({
      ...examples,
      metadata: { ...examples.metadata, labels: { 'ai.platform/routing-examples': 'true' } },
    });
    await untilReady('semantic-e2e', 'True/Resolved');
    expect(condition('semantic-e2e', 'Scorer')).toBe('True/EmbeddingModel');
  });

  it('says FeaturesOnly, with the fix, when the proxies run without the built-in embedding', async () => {
    await operator.stop();
    operator = new Operator({ ...options(), routingBuiltInEmbedding: false });
    await operator.start();
    await eventually('default FeaturesOnly', 60_000, () =>
      condition('default', 'Scorer') === 'False/FeaturesOnly' ? true : undefined,
    );
    expect(field('default', '{.status.conditions[?(@.type=="Scorer")].message}')).toContain(
      'set spec.scorer.semantic.embeddingModel to an embedding model the gateway routes, or set routing.builtInEmbedding: true',
    );
    // A policy whose embedding model is served keeps a learned classifier; both stay Ready.
    expect(condition('semantic-e2e', 'Scorer')).toBe('True/EmbeddingModel');
    expect(ready('default')).toBe('True/Resolved');
  });
});
