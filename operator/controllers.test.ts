import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { KubeClient } from '../crds/kube/kube-client.js';
import { CONTROLLERS } from './controllers.js';
import { collectionKey } from './runtime/collection.js';
import { watchesOf } from './runtime/controller-declaration.js';
import { SharedInformers } from './runtime/shared-informers.js';

describe('the registered controllers', () => {
  it('keep the names their queues and metrics are labelled with (dashboards and alerts read them)', () => {
    expect(CONTROLLERS.map((d) => d.name)).toEqual([
      'modeldeployment',
      'externalprovider',
      'apikey',
      'budget',
      'mcpserver',
      'routingpolicy',
      'identityprovider',
      'guardrail',
    ]);
  });

  it('list and watch each collection once, however many of them watch it', () => {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: 'c', server: 'https://127.0.0.1:1' }],
      users: [{ name: 'u' }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
    const informers = new SharedInformers(new KubeClient(kc), { resyncMs: 0, onError: () => {} });
    const watched = CONTROLLERS.flatMap((d) => watchesOf(d).map((w) => w.collection));
    const byController = new Map(CONTROLLERS.map((d) => [d.name, watchesOf(d).map((w) => informers.of(w.collection))]));
    // ModelDeployment's nine, ExternalProviders, ApiKeys, Budgets, McpServers with their
    // bridges' three (platform-agent, by label), and RoutingPolicies with their examples'
    // ConfigMaps (by label), and Guardrails; the ExternalProvider, RoutingPolicy and Guardrail
    // controllers' ModelDeployments and ExternalProviders are the other controllers'.
    expect(informers.size).toBe(20);
    expect(new Set(watched.map(collectionKey)).size).toBe(20);
    const md = byController.get('modeldeployment') ?? [];
    const ep = byController.get('externalprovider') ?? [];
    expect(ep[1]).toBe(md[0]);
    expect(ep[0]).toBe(md.at(-1));
    const rp = byController.get('routingpolicy') ?? [];
    expect([rp[1], rp[2]]).toEqual([md[0], ep[0]]);
    const gr = byController.get('guardrail') ?? [];
    expect([gr[1], gr[2]]).toEqual([md[0], ep[0]]);
  });
});

describe("the architecture page's table of controllers", () => {
  it('has a row for each registered controller, by its folder', () => {
    const page = readFileSync('docs/concepts/architecture.md', 'utf8');
    const rows = [...page.matchAll(/^\| [A-Za-z]+ \| `operator\/([a-z-]+)\/` \|/gm)].map((m) => m[1]);
    const folders = readdirSync('operator', { withFileTypes: true })
      .filter((d) => d.isDirectory() && existsSync(join('operator', d.name, `${d.name}-controller.ts`)))
      .map((d) => d.name);
    expect(rows.length).toBe(CONTROLLERS.length);
    expect([...rows].sort()).toEqual([...folders].sort());
  });
});
