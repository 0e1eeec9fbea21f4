import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { ControllerMetrics } from './controller-metrics.js';
import { WorkQueue } from './work-queue.js';

/** What a controller-runtime dashboard reads of two controllers sharing one registry. */
describe('controller metrics under controller-runtime names', () => {
  it('counts reconciles per controller and result, their time, the queue adds, retries and depth', async () => {
    const registry = new Registry();
    const m = new ControllerMetrics(registry);
    const queue = new WorkQueue({ concurrency: 2, baseDelayMs: 1, observer: m.queueObserver('things', ['thing']) });
    m.watchQueue('things', ['thing'], queue, 2);
    let failures = 1;
    const done: string[] = [];
    queue.run(
      m.instrument('thing', async (key) => {
        if (key === 'flaky' && failures-- > 0) throw new Error('conflict');
        done.push(key);
        return key === 'later' ? { requeueAfterMs: 60_000 } : undefined;
      }),
    );
    const other = m.instrument('other', async () => undefined);
    await other('x');
    for (const key of ['a', 'flaky', 'later']) queue.add(key);
    for (let i = 0; i < 100 && done.length < 3; i++) await new Promise((r) => setTimeout(r, 5));
    const text = await registry.metrics();
    expect(text).toContain('controller_runtime_reconcile_total{controller="thing",result="success"} 2');
    expect(text).toContain('controller_runtime_reconcile_total{controller="thing",result="error"} 1');
    expect(text).toContain('controller_runtime_reconcile_total{controller="thing",result="requeue_after"} 1');
    expect(text).toContain('controller_runtime_reconcile_total{controller="other",result="success"} 1');
    expect(text).toContain('controller_runtime_reconcile_errors_total{controller="thing"} 1');
    expect(text).toContain('controller_runtime_reconcile_time_seconds_count{controller="thing"} 4');
    expect(text).toContain('controller_runtime_max_concurrent_reconciles{controller="thing"} 2');
    expect(text).toContain('controller_runtime_active_workers{controller="thing"} 0');
    expect(text).toContain('workqueue_adds_total{name="things",controller="thing"} 4');
    expect(text).toContain('workqueue_retries_total{name="things",controller="thing"} 1');
    expect(text).toContain('workqueue_depth{name="things",controller="thing"} 0');
    await queue.shutdown();
  });
});
