import type { V1DaemonSet } from '@kubernetes/client-node';
import type { AutoscalerPolicy } from '../../crds/autoscaler-policy.js';
import { NODE_TEMPLATE_KEY } from '../../crds/constants.js';
import type { Condition } from '../../crds/meta.js';

/**
 * Cluster prerequisites for model deployments: the GPU device plugin must run on the
 * template's tainted nodes (toleration scheduling.platform/node-template Exists), and the
 * cluster should be in automated optimization mode. Violations are warnings, not failures:
 * the deployment proceeds and the PrerequisitesMet condition says what to fix.
 */

const PREREQUISITES_CONDITION = 'PrerequisitesMet';

const DEVICE_PLUGIN = /nvidia.*device-plugin|gpu-device-plugin|nvidia-gpu/;

function isGpuDevicePlugin(ds: V1DaemonSet): boolean {
  const name = ds.metadata?.name ?? '';
  const images = (ds.spec?.template.spec?.containers ?? []).map((c) => c.image ?? '');
  return DEVICE_PLUGIN.test(name) || images.some((i) => DEVICE_PLUGIN.test(i));
}

function toleratesTemplates(ds: V1DaemonSet): boolean {
  return (ds.spec?.template.spec?.tolerations ?? []).some(
    (t) => t.operator === 'Exists' && (t.key === NODE_TEMPLATE_KEY || t.key === undefined || t.key === ''),
  );
}

export function checkPrerequisites(
  daemonSets: V1DaemonSet[],
  policy: AutoscalerPolicy | undefined,
): Omit<Condition, 'lastTransitionTime'> {
  const problems: string[] = [];
  const plugins = daemonSets.filter(isGpuDevicePlugin);
  let reason = 'PrerequisitesMet';
  if (plugins.length === 0) {
    reason = 'DevicePluginNotFound';
    problems.push(
      'no GPU device-plugin DaemonSet found: install the NVIDIA device plugin (unless the node image ships the drivers) ' +
        `with the toleration key ${NODE_TEMPLATE_KEY} operator Exists`,
    );
  } else {
    for (const ds of plugins.filter((d) => !toleratesTemplates(d))) {
      reason = 'DevicePluginMissingToleration';
      problems.push(
        `DaemonSet ${ds.metadata?.namespace}/${ds.metadata?.name} lacks the toleration key ${NODE_TEMPLATE_KEY} operator Exists, ` +
          'so GPUs on the model nodes are never advertised: add it',
      );
    }
  }
  if (policy?.spec.optimizationMode !== 'Automated') {
    if (problems.length === 0) reason = 'NotAutomated';
    problems.push(
      `the cluster is not in automated optimization mode (AutoscalerPolicy cluster: optimizationMode ${policy?.spec.optimizationMode ?? 'unset'}); set it to Automated`,
    );
  }
  return problems.length === 0
    ? {
        type: PREREQUISITES_CONDITION,
        status: 'True',
        reason,
        message: 'GPU device plugin tolerates model nodes; optimization is automated',
      }
    : { type: PREREQUISITES_CONDITION, status: 'False', reason, message: problems.join('; ') };
}
