import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Operator } from '../../operator/operator.js';
import { capturedLogger } from '../support/capture.js';
import { applyObjects, eventually, kubeConfig, kubectl, kubectlOk } from '../support/kube.js';

/**
 * Guardrail with the operator on the real control plane: the example is Ready (its built-in
 * detectors and its RE2 pattern run); a pattern that is not RE2 and a judge whose model nothing
 * serves are not, each saying why, in status and an Event, until a provider serves the judge.
 */

const NS = 'platform-agent';
let operator: Operator;

const field = (name: string, path: string) =>
  kubectlOk(['get', 'guardrails', name, '-n', NS, '-o', `jsonpath=${path}`]);
const ready = (name: string) =>
  `${field(name, '{.status.conditions[?(@.type=="Ready")].status}')}/${field(name, '{.status.conditions[?(@.type=="Ready")].reason}')}`;

beforeAll(async () => {
  operator = new Operator({
    kubeConfig: kubeConfig(),
    cluster: { organizationId: 'acme', clusterId: 'prod-1', cloud: 'aws' as const, region: 'us-east-1' },
    images: { Ollama: 'ollama/ollama:test' },
    port: 0,
    resyncMs: 0,
    leaderElection: false as const,
    logger: capturedLogger('operator-guardrails'),
  });
  await operator.start();
});

afterAll(async () => {
  await operator?.stop();
  kubectl([
    'delete',
    'guardrails',
    'pii-and-secrets',
    'gr-e2e-unready',
    '-n',
    NS,
    '--ignore-not-found',
    '--wait=false',
  ]);
  kubectl(['delete', 'externalproviders', 'gr-e2e-judge', '-n', NS, '--ignore-not-found', '--wait=false']);
});

describe('Guardrail with the operator on the real control plane', () => {
  it('is Ready when its detectors run, and says which does not and why', async () => {
    kubectlOk(['apply', '-f', 'crds/examples/guardrail.yaml']);
    await eventually('the example Ready', 60_000, () =>
      ready('pii-and-secrets') === 'True/DetectorsReady' ? true : undefined,
    );
    expect(field('pii-and-secrets', '{.status.detectors[*].name}')).toBe('builtIn pattern/EmployeeId');

    applyObjects({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'Guardrail',
      metadata: { name: 'gr-e2e-unready', namespace: NS },
      spec: {
        detectors: { patterns: [{ name: 'Ahead', regex: 'a(?=b)' }], judge: { model: 'gr-e2e-guard-model' } },
        action: 'Block',
      },
    });
    await eventually('not Ready', 60_000, () =>
      ready('gr-e2e-unready') === 'False/DetectorNotReady' ? true : undefined,
    );
    const message = field('gr-e2e-unready', '{.status.conditions[?(@.type=="Ready")].message}');
    expect(message).toMatch(
      /^pattern\/Ahead: not RE2, skipped: .*; judge: no ModelDeployment or ExternalProvider serves gr-e2e-guard-model/,
    );
    const events = kubectlOk([
      'get',
      'events',
      '-n',
      NS,
      '--field-selector',
      'involvedObject.kind=Guardrail,involvedObject.name=gr-e2e-unready',
      '-o',
      'jsonpath={.items[*].reason}',
    ]);
    expect(events).toContain('DetectorNotReady');

    // A provider serving the judge's model: the judge runs; the pattern still does not.
    applyObjects({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ExternalProvider',
      metadata: { name: 'gr-e2e-judge', namespace: NS },
      spec: {
        provider: 'openai',
        displayName: 'Judge',
        auth: { method: 'APIKey', secretRef: { name: 'gr-e2e-judge-key' } },
        models: ['gr-e2e-guard-model'],
      },
    });
    await eventually('the judge ready', 60_000, () =>
      field('gr-e2e-unready', '{.status.detectors[?(@.name=="judge")].ready}') === 'true' ? true : undefined,
    );
    expect(ready('gr-e2e-unready')).toBe('False/DetectorNotReady');
  });
});
