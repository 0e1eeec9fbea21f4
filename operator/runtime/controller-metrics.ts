import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { ReconcileResult, WorkQueue } from './work-queue.js';

/**
 * Reconcile and work-queue metrics per controller, under controller-runtime's names and labels
 * (controller_runtime_reconcile_total{controller,result}, ..._reconcile_time_seconds,
 * workqueue_depth{name,controller}, ...), so the dashboards and alerts written for Go operators
 * (kubebuilder's, kube-prometheus') read this operator as they read those.
 */

// controller-runtime's buckets for reconcile time.
const RECONCILE_BUCKETS = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.25, 1.5, 1.75, 2,
  2.5, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
];

export type Reconcile = (key: string) => Promise<ReconcileResult>;

export class ControllerMetrics {
  private readonly total: Counter<'controller' | 'result'>;
  private readonly errors: Counter<'controller'>;
  private readonly time: Histogram<'controller'>;
  private readonly active = new Map<string, number>();
  private readonly queues = new Map<string, { queue: WorkQueue; controller: string }>();
  private readonly workers = new Map<string, number>();
  private readonly adds: Counter<'name' | 'controller'>;
  private readonly retries: Counter<'name' | 'controller'>;

  constructor(registry: Registry) {
    this.total = new Counter({
      name: 'controller_runtime_reconcile_total',
      help: 'Total number of reconciliations per controller',
      labelNames: ['controller', 'result'],
      registers: [registry],
    });
    this.errors = new Counter({
      name: 'controller_runtime_reconcile_errors_total',
      help: 'Total number of reconciliation errors per controller',
      labelNames: ['controller'],
      registers: [registry],
    });
    this.time = new Histogram({
      name: 'controller_runtime_reconcile_time_seconds',
      help: 'Length of time per reconciliation per controller',
      labelNames: ['controller'],
      buckets: RECONCILE_BUCKETS,
      registers: [registry],
    });
    const active = this.active;
    new Gauge({
      name: 'controller_runtime_active_workers',
      help: 'Number of currently used workers per controller',
      labelNames: ['controller'],
      registers: [registry],
      collect() {
        for (const [controller, n] of active) this.set({ controller }, n);
      },
    });
    const workers = this.workers;
    new Gauge({
      name: 'controller_runtime_max_concurrent_reconciles',
      help: 'Maximum number of concurrent reconciles per controller',
      labelNames: ['controller'],
      registers: [registry],
      collect() {
        for (const [controller, n] of workers) this.set({ controller }, n);
      },
    });
    const queues = this.queues;
    new Gauge({
      name: 'workqueue_depth',
      help: 'Current depth of workqueue',
      labelNames: ['name', 'controller'],
      registers: [registry],
      collect() {
        for (const [name, q] of queues) this.set({ name, controller: q.controller }, q.queue.depth);
      },
    });
    this.adds = new Counter({
      name: 'workqueue_adds_total',
      help: 'Total number of adds handled by workqueue',
      labelNames: ['name', 'controller'],
      registers: [registry],
    });
    this.retries = new Counter({
      name: 'workqueue_retries_total',
      help: 'Total number of retries handled by workqueue',
      labelNames: ['name', 'controller'],
      registers: [registry],
    });
  }

  /** The observer a controller's WorkQueue reports its adds and retries to. */
  queueObserver(name: string, controllers: string[]): { added(): void; retried(): void } {
    const labels = { name, controller: controllers.join(',') };
    return { added: () => this.adds.inc(labels), retried: () => this.retries.inc(labels) };
  }

  /**
   * Registers a queue (its depth is read when scraped) and the workers of the controllers it
   * feeds (one controller per queue today; the label takes several).
   */
  watchQueue(name: string, controllers: string[], queue: WorkQueue, concurrency: number): void {
    this.queues.set(name, { queue, controller: controllers.join(',') });
    for (const c of controllers) this.workers.set(c, concurrency);
  }

  /**
   * A reconcile function that counts itself under `controller`: result success, requeue_after
   * (it asked to be run again later) or error, its time, and the workers it occupies.
   */
  instrument(controller: string, reconcile: Reconcile): Reconcile {
    this.active.set(controller, this.active.get(controller) ?? 0);
    this.workers.set(controller, this.workers.get(controller) ?? 0);
    return async (key) => {
      const end = this.time.startTimer({ controller });
      this.active.set(controller, (this.active.get(controller) ?? 0) + 1);
      try {
        const result = await reconcile(key);
        this.total.inc({ controller, result: result && result.requeueAfterMs > 0 ? 'requeue_after' : 'success' });
        return result;
      } catch (err) {
        this.total.inc({ controller, result: 'error' });
        this.errors.inc({ controller });
        throw err;
      } finally {
        this.active.set(controller, (this.active.get(controller) ?? 1) - 1);
        end();
      }
    };
  }
}
