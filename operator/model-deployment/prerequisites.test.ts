import type { V1DaemonSet } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import type { AutoscalerPolicy } from '../../crds/autoscaler-policy.js';
import { checkPrerequisites } from './prerequisites.js';

const plugin = (tolerations: Array<{ key?: string; operator: string }>): V1DaemonSet => ({
  metadata: { name: 'nvidia-device-plugin-daemonset', namespace: 'kube-system' },
  spec: {
    selector: {},
    template: { spec: { containers: [{ name: 'p', image: 'nvcr.io/nvidia/k8s-device-plugin:v0.17.0' }], tolerations } },
  },
});
const policy = (mode: 'ReadOnly' | 'Automated'): AutoscalerPolicy => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'AutoscalerPolicy',
  metadata: { name: 'cluster' },
  spec: { optimizationMode: mode, unschedulablePods: { enabled: true } },
});

describe('checkPrerequisites', () => {
  it('is met when the device plugin tolerates the template taint and optimization is automated', () => {
    const c = checkPrerequisites(
      [plugin([{ key: 'scheduling.platform/node-template', operator: 'Exists' }])],
      policy('Automated'),
    );
    expect(c.status).toBe('True');
    // A blanket Exists toleration also covers the taint.
    expect(checkPrerequisites([plugin([{ operator: 'Exists' }])], policy('Automated')).status).toBe('True');
  });

  it('warns when the device plugin lacks the toleration, naming the DaemonSet and the fix', () => {
    const c = checkPrerequisites([plugin([{ key: 'nvidia.com/gpu', operator: 'Exists' }])], policy('Automated'));
    expect(c).toMatchObject({ status: 'False', reason: 'DevicePluginMissingToleration' });
    expect(c.message).toContain(
      'kube-system/nvidia-device-plugin-daemonset lacks the toleration key scheduling.platform/node-template operator Exists',
    );
  });

  it('warns when there is no device plugin and when the cluster is not automated', () => {
    const c = checkPrerequisites([], policy('ReadOnly'));
    expect(c.reason).toBe('DevicePluginNotFound');
    expect(c.message).toContain('no GPU device-plugin DaemonSet found');
    expect(c.message).toContain('not in automated optimization mode');
    expect(checkPrerequisites([plugin([{ operator: 'Exists' }])], undefined).reason).toBe('NotAutomated');
  });
});
