import type { Budget, BudgetStatus } from '../crds/budget.js';
import { periodNoun } from '../crds/budget-period.js';
import { type Informer, keyOf } from '../crds/kube/informer.js';
import type { KubeClient } from '../crds/kube/kube-client.js';
import { budgetCondition, requeue } from './api-key-status.js';
import { findCondition, setCondition } from './conditions.js';
import type { EventRecorder } from './events.js';
import { writeStatusIfChanged } from './status-write.js';
import type { Enqueue, ReconcileResult } from './work-queue.js';

/**
 * Reconciles a Budget: the proxies report the period's spend in status.usage; this turns it
 * into the BudgetExhausted condition and an Event when it becomes exhausted, and looks again
 * when the period resets.
 */
/** What the Budget controller watches: Budgets, each event its own key. */
export function watchBudgets(budgets: Informer<Budget>, enqueue: Enqueue): void {
  budgets.on((_event, b) => enqueue(keyOf(b)));
}

export class BudgetController {
  constructor(
    private readonly client: KubeClient,
    private readonly budgets: Informer<Budget>,
    private readonly events: EventRecorder,
    private readonly opts: { now: () => Date },
  ) {}

  async reconcile(key: string): Promise<ReconcileResult> {
    const budget = this.budgets.get(key);
    if (!budget || budget.metadata.deletionTimestamp) return;
    const now = this.opts.now();
    const generation = budget.metadata.generation ?? 0;
    const old = budget.status ?? {};
    const exhausted = budgetCondition(budget.spec, old.usage, now, generation);
    let conditions = setCondition(old.conditions, exhausted, now);
    conditions = setCondition(
      conditions,
      {
        type: 'Ready',
        status: 'True',
        reason: 'Enforced',
        message: `requests tagged ${budget.spec.tag} are checked against ${budget.spec.usd} USD per ${periodNoun(budget.spec.period)}`,
        observedGeneration: generation,
      },
      now,
    );
    const status: BudgetStatus = {
      observedGeneration: generation,
      ...(old.usage ? { usage: old.usage } : {}),
      conditions,
    };
    await writeStatusIfChanged(this.client, 'budgets', budget, status, ['usage']);
    if (exhausted.status === 'True' && findCondition(old.conditions, 'BudgetExhausted')?.status !== 'True') {
      await this.events.record(budget, 'Warning', exhausted.reason, `${budget.spec.tag}: ${exhausted.message}`);
    }
    const next = requeue(budget.spec, undefined, now);
    return next.requeueAfterMs !== undefined ? { requeueAfterMs: next.requeueAfterMs } : undefined;
  }
}
