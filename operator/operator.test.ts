import { describe, expect, it } from 'vitest';
import { resourceOf } from './operator.js';

describe('resourceOf', () => {
  it('names the resource of core, grouped, namespaced and cluster-scoped paths', () => {
    expect(resourceOf('/api/v1/namespaces/platform-llms/pods')).toBe('pods');
    expect(resourceOf('/api/v1/namespaces/platform-llms/pods/x')).toBe('pods');
    expect(resourceOf('/api/v1/nodes')).toBe('nodes');
    expect(resourceOf('/apis/coordination.k8s.io/v1/namespaces/platform-agent/leases/op')).toBe('leases');
    expect(resourceOf('/apis/ai.platform/v1beta1/nodetemplates/llms-by-platform')).toBe('nodetemplates');
    expect(resourceOf('/apis/ai.platform/v1beta1/namespaces/platform-llms/modeldeployments/a/status')).toBe(
      'modeldeployments',
    );
    expect(resourceOf('/api/v1/namespaces')).toBe('namespaces');
  });
});
