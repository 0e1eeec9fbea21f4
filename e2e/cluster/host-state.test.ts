import { describe, expect, it } from 'vitest';
import { diffHostState, type HostState } from './host-state.js';
import { nodeMade } from './real-node.js';

const state = (over: Partial<HostState> = {}): HostState => ({
  sysctls: { 'vm/overcommit_memory': '1' },
  links: ['lo', 'eth0'],
  routes: ['default via 10.0.0.1 dev eth0'],
  mounts: ['/', '/proc'],
  firewall: [],
  cgroups: ['/sys/fs/cgroup/memory/user.slice'],
  ...over,
});

describe("the real node's host check", () => {
  it('never reports what a neighbour changed meanwhile', () => {
    const after = state({
      // A neighbour's cgroup ended (the failure seen in CI), another suite's container network came up.
      cgroups: ['/sys/fs/cgroup/memory/user.slice', '/sys/fs/cgroup/memory/podman-4711'],
      links: ['lo', 'eth0', 'podman1', 'veth5a2b'],
      routes: ['default via 10.0.0.1 dev eth0', '10.88.0.0/16 dev podman1'],
      firewall: ['-A POSTROUTING -s 10.88.0.0/16 -j MASQUERADE'],
    });
    const before = state({ cgroups: ['/sys/fs/cgroup/memory/user.slice', '/sys/fs/cgroup/memory/session-9.scope'] });
    expect(diffHostState(before, after, nodeMade)).toEqual([]);
  });

  it("reports each leak of the node's: its cgroups, link, routes, mounts, rules and the kubelet's sysctls", () => {
    const after = state({
      sysctls: { 'vm/overcommit_memory': '0' },
      cgroups: ['/sys/fs/cgroup/memory/user.slice', '/sys/fs/cgroup/memory/pao-real-node/kubepods'],
      links: ['lo', 'eth0', 'pao-node0'],
      routes: ['default via 10.0.0.1 dev eth0', '10.85.0.0/24 via 10.77.0.2 dev pao-node0'],
      mounts: ['/', '/proc', '/var/tmp/pao-node-abc/kubelet'],
      firewall: ['-A FORWARD -d 10.96.0.10/32 -j ACCEPT'],
    });
    expect(diffHostState(state(), after, nodeMade)).toEqual([
      'sysctl vm/overcommit_memory: 1 -> 0',
      'links: added pao-node0',
      'routes: added 10.85.0.0/24 via 10.77.0.2 dev pao-node0',
      'mounts: added /var/tmp/pao-node-abc/kubelet',
      'firewall: added -A FORWARD -d 10.96.0.10/32 -j ACCEPT',
      'cgroups: added /sys/fs/cgroup/memory/pao-real-node/kubepods',
    ]);
  });
});
