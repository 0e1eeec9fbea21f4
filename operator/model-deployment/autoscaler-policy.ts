import type { AutoscalerPolicy } from '../../crds/autoscaler-policy.js';
import type { NodeTemplate } from '../../crds/node-template.js';

/**
 * Deploying a model needs the autoscaler to add GPU nodes for its pending pods. If the
 * cluster's unscheduled-pods policy is off, it is switched on with only the hosted-model
 * template enabled, so that turning it on adds no other kind of node; if it is already on,
 * nothing else is touched.
 */

export interface PolicyPlan {
  /** Switch unschedulablePods on (creating the singleton policy when there is none). */
  switchOn: boolean;
  createPolicy: boolean;
  /** Templates whose `enabled` must change. */
  templates: Array<{ name: string; enabled: boolean }>;
}

export function planUnschedulablePods(
  policy: AutoscalerPolicy | undefined,
  templates: NodeTemplate[],
  llmTemplate: string,
): PolicyPlan {
  if (policy?.spec.unschedulablePods?.enabled) return { switchOn: false, createPolicy: false, templates: [] };
  const changes: PolicyPlan['templates'] = [];
  for (const t of templates) {
    const name = t.metadata.name ?? '';
    const enabled = name === llmTemplate;
    if ((t.spec.enabled ?? true) !== enabled) changes.push({ name, enabled });
  }
  return { switchOn: true, createPolicy: policy === undefined, templates: changes };
}
