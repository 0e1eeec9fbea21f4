import { describe, expect, it } from 'vitest';
import { periodEnd, periodStart } from './budget-period.js';

describe('budget periods (UTC)', () => {
  const cases: Array<[string, 'Daily' | 'Weekly' | 'Monthly', string, string]> = [
    ['a day', 'Daily', '2026-11-23T00:00:00.000Z', '2026-11-24T00:00:00.000Z'],
    ['a week from Monday', 'Weekly', '2026-11-23T00:00:00.000Z', '2026-11-30T00:00:00.000Z'],
    ['a month from the first', 'Monthly', '2026-11-01T00:00:00.000Z', '2026-12-01T00:00:00.000Z'],
  ];
  for (const [name, period, start, end] of cases) {
    it(`${name}`, () => {
      const now = new Date('2026-11-23T17:45:12Z'); // a Monday
      expect(periodStart(period, now).toISOString()).toBe(start);
      expect(periodEnd(period, now).toISOString()).toBe(end);
    });
  }

  it('a Sunday belongs to the week that began on the Monday before', () => {
    expect(periodStart('Weekly', new Date('2026-11-29T23:59:59Z')).toISOString()).toBe('2026-11-23T00:00:00.000Z');
  });

  it('the month ends at the first of the next, across a year', () => {
    expect(periodEnd('Monthly', new Date('2026-12-31T23:00:00Z')).toISOString()).toBe('2027-01-01T00:00:00.000Z');
    expect(periodEnd('Monthly', new Date('2027-01-31T12:00:00Z')).toISOString()).toBe('2027-02-01T00:00:00.000Z');
  });
});
