import type { BudgetPeriod } from './api-key.js';

/**
 * Budget periods in UTC: a day from midnight, a week from Monday midnight, a month from the
 * first. The proxy checks spend since the start; the operator and the 429's Retry-After use
 * the end.
 */

export function periodStart(period: BudgetPeriod, now: Date): Date {
  const d = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()));
  if (period === 'Weekly') d.setUTCDate(d.getUTCDate() - ((d.getUTCDay() + 6) % 7));
  if (period === 'Monthly') d.setUTCDate(1);
  return d;
}

export function periodEnd(period: BudgetPeriod, now: Date): Date {
  const d = periodStart(period, now);
  if (period === 'Daily') d.setUTCDate(d.getUTCDate() + 1);
  else if (period === 'Weekly') d.setUTCDate(d.getUTCDate() + 7);
  else d.setUTCMonth(d.getUTCMonth() + 1);
  return d;
}

/** "day", "week" or "month", for messages. */
export const periodNoun = (period: BudgetPeriod): string =>
  period === 'Daily' ? 'day' : period === 'Weekly' ? 'week' : 'month';
