import { describe, expect, it } from 'vitest';
import type { AutoscalerPolicy } from '../../crds/autoscaler-policy.js';
import type { NodeTemplate } from '../../crds/node-template.js';
import { planUnschedulablePods } from './autoscaler-policy.js';

describe('planUnschedulablePods', () => {
  const template = (name: string, enabled: boolean): NodeTemplate => ({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'NodeTemplate',
    metadata: { name },
    spec: { enabled },
  });
  const policy = (enabled: boolean): AutoscalerPolicy => ({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'AutoscalerPolicy',
    metadata: { name: 'cluster' },
    spec: { optimizationMode: 'Automated', unschedulablePods: { enabled } },
  });
  const templates = [template('default', true), template('llms-by-platform', false), template('batch', false)];

  it('switches the policy on with only the LLM template enabled', () => {
    expect(planUnschedulablePods(policy(false), templates, 'llms-by-platform')).toEqual({
      switchOn: true,
      createPolicy: false,
      templates: [
        { name: 'default', enabled: false },
        { name: 'llms-by-platform', enabled: true },
      ],
    });
  });

  it('touches nothing when the policy is already on', () => {
    expect(planUnschedulablePods(policy(true), templates, 'llms-by-platform')).toEqual({
      switchOn: false,
      createPolicy: false,
      templates: [],
    });
  });

  it('creates the policy when the cluster has none', () => {
    expect(planUnschedulablePods(undefined, [], 'llms-by-platform')).toEqual({
      switchOn: true,
      createPolicy: true,
      templates: [],
    });
  });
});
