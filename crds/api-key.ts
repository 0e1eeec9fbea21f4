import type { CommonStatus, Resource } from './meta.js';

export type ApiKeyRole = 'User' | 'Admin';
export type BudgetPeriod = 'Daily' | 'Weekly' | 'Monthly';

export interface BudgetSpec {
  usd: number;
  period: BudgetPeriod;
}

interface ApiKeyRateLimit {
  requestsPerSecond?: number;
  burst?: number;
  tokensPerMinute?: number;
}

export interface ApiKeySpec {
  team: string;
  /** Defaults to User. */
  role: ApiKeyRole;
  /** Enforced tags, key to value (team:<team> is always added). */
  tags?: Record<string, string>;
  /** Allow-list of model names; omitted: every routed model. */
  models?: string[];
  rateLimit?: ApiKeyRateLimit;
  budget?: BudgetSpec;
  /** RFC 3339. */
  expiresAt?: string;
  /** Changing it rotates the key. Defaults to 0. */
  rotation: number;
}

/** What the proxies observe and write into status.usage. */
export interface UsageStatus {
  period?: BudgetPeriod;
  periodStart?: string;
  spendUsd?: number;
  lastUsed?: string;
  updated?: string;
}

export interface ApiKeyStatus extends CommonStatus {
  digest?: string;
  keyHint?: string;
  rotation?: number;
  usage?: UsageStatus;
}

export type ApiKey = Resource<'ApiKey', ApiKeySpec, ApiKeyStatus>;
