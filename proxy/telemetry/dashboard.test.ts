import { readFileSync } from 'node:fs';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { ControllerMetrics } from '../../operator/runtime/controller-metrics.js';
import { ProxyMetrics } from './metrics.js';

/**
 * The chart's Grafana dashboard reads only metrics the proxy and the operator export: a renamed
 * metric would leave a panel empty without any error, so every name in a query is checked.
 */
describe('the Grafana dashboard', () => {
  it('queries only metrics that exist', async () => {
    const dashboard = JSON.parse(readFileSync('charts/platform-ai-optimizer/dashboards/gateway.json', 'utf8')) as {
      panels: { title: string; targets: { expr: string }[] }[];
    };
    const proxy = new ProxyMetrics();
    proxy.collectProcessMetrics();
    const operator = new Registry();
    new ControllerMetrics(operator);
    const exported = new Set(
      [await proxy.registry.metrics(), await operator.metrics()]
        .join('\n')
        .split('\n')
        .filter((l) => l.startsWith('# TYPE '))
        .map((l) => l.split(' ')[2]),
    );
    const FUNCTIONS = new Set(['sum', 'by', 'rate', 'histogram_quantile', 'le', 'without', 'max', 'avg']);
    let checked = 0;
    for (const panel of dashboard.panels) {
      for (const { expr } of panel.targets) {
        // Names outside label matchers ({...}) and grouping clauses (by (...)).
        const bare = expr.replace(/\{[^}]*\}/g, '').replace(/\b(by|without)\s*\([^)]*\)/g, '');
        const names = bare.match(/[a-z_][a-z0-9_]*/g) ?? [];
        for (const name of names.filter((n) => !FUNCTIONS.has(n) && n.includes('_'))) {
          const base = name.replace(/_(bucket|sum|count)$/, '');
          expect(exported.has(name) || exported.has(base), `${panel.title}: ${name}`).toBe(true);
          checked++;
        }
      }
    }
    expect(checked).toBeGreaterThan(15);
  });
});
