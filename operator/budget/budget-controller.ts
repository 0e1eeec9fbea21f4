import type { Budget, BudgetStatus } from '../../crds/budget.js';
import { periodNoun } from '../../crds/budget-period.js';
import { AGENT_NAMESPACE, API_GROUP } from '../../crds/constants.js';
import type { Informer } from '../../crds/kube/informer.js';
import type { KubeClient } from '../../crds/kube/kube-client.js';
import { budgetCondition, requeue } from '../api-key/api-key-status.js';
import { platformCollection } from '../runtime/collection.js';
import { findCondition, setCondition } from '../runtime/conditions.js';
import type { ControllerDeclaration } from '../runtime/controller-declaration.js';
import type { EventRecorder } from '../runtime/events.js';
import { writeStatusIfChanged } from '../runtime/status-write.js';
import type { ReconcileResult } from '../runtime/work-queue.js';

/**
 * Reconciles a Budget: the proxies report the period's spend in status.usage; this turns it
 * into the BudgetExhausted condition and an Event when it becomes exhausted, and looks again
 * when the period resets.
 */
class BudgetController {
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

const BUDGETS = platformCollection<Budget>('budgets', AGENT_NAMESPACE);

/** The Budget controller: each Budget is its own key. */
export const budgetController: ControllerDeclaration = {
  name: 'budget',
  for: BUDGETS,
  watches: [],
  rbac: [
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [API_GROUP],
      resources: ['budgets/status'],
      verbs: ['get', 'patch', 'update'],
      reason: 'the BudgetExhausted and Ready conditions, written by merge patch when they changed',
    },
    {
      scope: AGENT_NAMESPACE,
      apiGroups: [''],
      resources: ['events'],
      verbs: ['create', 'patch'],
      reason: 'Events on Budgets',
    },
  ],
  failure: 'budget reconcile failed',
  async start(ctx) {
    const controller = new BudgetController(ctx.client, ctx.caches.of(BUDGETS), ctx.events, { now: ctx.now });
    return { reconcile: (key) => controller.reconcile(key) };
  },
};
