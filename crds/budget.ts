import type { BudgetSpec, UsageStatus } from './api-key.js';
import type { CommonStatus, Resource } from './meta.js';

export interface TagBudgetSpec extends BudgetSpec {
  /** key:value */
  tag: string;
}

export interface BudgetStatus extends CommonStatus {
  /** As an ApiKey's, without lastUsed. */
  usage?: Omit<UsageStatus, 'lastUsed'>;
}

export type Budget = Resource<'Budget', TagBudgetSpec, BudgetStatus>;
