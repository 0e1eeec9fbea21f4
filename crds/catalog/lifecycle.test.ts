import { describe, expect, it } from 'vitest';
import { daysToRetirement, deprecationHeaders, isDeprecated, lifecycleOf, replacementOf } from './lifecycle.js';
import { loadBedrockPrices, mergePrices, parseBedrockPrices } from './prices.js';

const table = loadBedrockPrices();
const day = (d: string) => Date.parse(`${d}T12:00:00Z`);

describe('the shipped lifecycle table', () => {
  it('knows that Claude Sonnet 4.5 retires on 2026-11-30 and names Sonnet 5.5, under any of its ids', () => {
    for (const id of ['claude-sonnet-4-5', 'claude-sonnet-4-5-20250929']) {
      expect(lifecycleOf(table, 'anthropic', id)).toMatchObject({ retires: '2026-11-30' });
      expect(replacementOf(table, 'anthropic', id)).toBe('claude-sonnet-5-5');
    }
    // The replacement is priced, so moving to it keeps the cost known.
    expect(table.providers?.anthropic?.['claude-sonnet-5-5']).toMatchObject({ input: 2, output: 10 });
  });

  it('leaves current models and other providers alone', () => {
    expect(lifecycleOf(table, 'anthropic', 'claude-sonnet-5-5')).toBeUndefined();
    expect(lifecycleOf(table, 'anthropic', 'claude-haiku-4-5-20251001')).toBeUndefined();
    // Claude on Vertex AI retires on Google's schedule, not the Claude API's.
    expect(lifecycleOf(table, 'vertex-ai', 'claude-sonnet-4-5@20250929')).toBeUndefined();
    // A prefix of a retiring id is another model.
    expect(lifecycleOf(table, 'anthropic', 'claude-sonnet-4-6')).toBeUndefined();
    expect(lifecycleOf(table, 'anthropic', 'claude-sonnet-4-20250514')).toMatchObject({ retires: '2026-06-15' });
  });

  it('follows a replacement that is going away too, to the one that is not', () => {
    // Sonnet 3.7's replacement was Sonnet 4.5, which retires in turn.
    expect(replacementOf(table, 'anthropic', 'claude-3-7-sonnet-20250219')).toBe('claude-sonnet-5-5');
  });
});

describe('deprecation as of a day', () => {
  const l = { deprecated: '2026-10-21', retires: '2026-11-30', replacement: 'claude-sonnet-5-5' };

  it('is deprecated from its deprecation date, and counts the days to retirement', () => {
    expect(isDeprecated(l, day('2026-10-20'))).toBe(false);
    expect(isDeprecated(l, day('2026-10-21'))).toBe(true);
    expect(daysToRetirement(l, Date.parse('2026-11-29T12:00:00Z'))).toBe(1);
    expect(daysToRetirement(l, day('2026-12-02'))).toBeLessThan(0);
    expect(isDeprecated({ retires: '2026-11-30' }, day('2026-12-01'))).toBe(true);
  });

  it('answers RFC 9745 Deprecation and RFC 8594 Sunset, only once deprecated', () => {
    expect(deprecationHeaders(l, day('2026-10-01'))).toEqual({});
    expect(deprecationHeaders(l, day('2026-11-29'))).toEqual({
      deprecation: `@${Date.parse('2026-10-21T00:00:00Z') / 1000}`,
      sunset: 'Mon, 30 Nov 2026 00:00:00 GMT',
    });
  });
});

describe('the prices ConfigMap', () => {
  it('adds a date a provider announced, and its entries win over the shipped ones', () => {
    const over = parseBedrockPrices(
      'lifecycle:\n  openai:\n    gpt-4o: { deprecated: 2026-11-01, retires: "2026-12-15", replacement: gpt-5 }\n',
    );
    const merged = mergePrices(table, over);
    expect(lifecycleOf(merged, 'openai', 'gpt-4o-2024-08-06')).toEqual({
      deprecated: '2026-11-01',
      retires: '2026-12-15',
      replacement: 'gpt-5',
    });
    // Azure deployments of an OpenAI model retire with it.
    expect(lifecycleOf(merged, 'azure-openai', 'gpt-4o')?.retires).toBe('2026-12-15');
    expect(lifecycleOf(merged, 'anthropic', 'claude-sonnet-4-5')?.retires).toBe('2026-11-30');
  });

  it('refuses a malformed entry whole, naming it', () => {
    expect(() => parseBedrockPrices('lifecycle:\n  openai:\n    gpt-4o: { retires: next week }\n')).toThrow(
      /lifecycle\.openai\.gpt-4o\.retires must be a date/,
    );
    expect(() => parseBedrockPrices('lifecycle:\n  openai:\n    gpt-4o: { retires: "2026-02-30" }\n')).toThrow(
      /retires must be a date/,
    );
    expect(() => parseBedrockPrices('lifecycle:\n  openai:\n    gpt-4o: { replacement: gpt-5 }\n')).toThrow(
      /needs a deprecated or a retires date/,
    );
  });
});
