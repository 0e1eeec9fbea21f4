import { describe, expect, it } from 'vitest';
import { ProxyMetrics } from './metrics.js';

describe('tag labels', () => {
  it('keep the allow-listed keys only, and cap the distinct values of each key', async () => {
    const m = new ProxyMetrics(['team'], 3);
    const label = (value: string) =>
      m.tagLabels([
        { key: 'team', value },
        { key: 'user', value: value },
      ]);
    expect(label('a')).toEqual({ tag_team: 'a' });
    for (const v of ['b', 'c']) label(v);
    // A fourth distinct value no longer becomes its own series; known ones still do.
    expect(label('d')).toEqual({ tag_team: '_other' });
    expect(label('b')).toEqual({ tag_team: 'b' });
    expect(m.tagLabels([])).toEqual({ tag_team: '' });
    for (const v of ['a', 'b', 'c', ...Array.from({ length: 1000 }, (_, i) => `v${i}`)]) {
      m.requests.inc({ model: 'm', provider: 'p', ...label(v), status: '200' });
    }
    expect((await m.requests.get()).values.map((v) => v.labels.tag_team).sort()).toEqual(['_other', 'a', 'b', 'c']);
  });

  it('let only answered requests claim a value: a flood of refused ones does not evict real teams', async () => {
    const m = new ProxyMetrics(['team'], 100);
    const observe = (team: string, status: number, model = 'llama3.1:8b') =>
      m.observeRequest({
        model,
        provider: 'p',
        tags: [{ key: 'team', value: team }],
        status,
        code: status === 200 ? '' : 'x',
        seconds: 0.01,
        costUsd: 0,
      });
    for (let i = 0; i < 5000; i++) observe(`junk-${i}`, 404, '');
    for (let i = 0; i < 500; i++) observe(`junk-${i}`, 400);
    observe('ml', 200);
    observe('search', 200);
    const teams = new Set((await m.requests.get()).values.map((v) => v.labels.tag_team));
    expect(teams).toEqual(new Set(['_other', 'ml', 'search']));
  });

  it('never labels rate-limited requests with anything derived from the key', async () => {
    const m = new ProxyMetrics();
    m.rateLimited.inc();
    const values = (await m.rateLimited.get()).values;
    expect(values).toEqual([expect.objectContaining({ value: 1, labels: {} })]);
  });

  it("counts what a scrape reads; an upstream's impossible usage adds nothing and never breaks a scrape", async () => {
    const m = new ProxyMetrics(['team']);
    const observe = (promptTokens: number, completionTokens: number, costUsd = 0.5) =>
      m.observeRequest({
        model: 'm',
        provider: 'p',
        tags: [],
        status: 200,
        code: '',
        seconds: 0.01,
        usage: { promptTokens, completionTokens },
        costUsd,
      });
    observe(10, 5);
    observe(-1, Number.POSITIVE_INFINITY, Number.NaN);
    observe(Number.NaN, 3);
    const tokens = async (direction: string) =>
      (await m.tokens.get()).values.find((v) => v.labels.direction === direction)?.value;
    expect(await tokens('prompt')).toBe(10);
    expect(await tokens('completion')).toBe(8);
    expect((await m.cost.get()).values[0]?.value).toBe(1);
    expect((await m.requests.get()).values[0]?.value).toBe(3);
    // Tallies are handed over once: a second scrape reads the same totals, not twice them.
    expect(await tokens('prompt')).toBe(10);
    expect(await m.registry.metrics()).toContain('pao_gateway_tokens_total');
  });
});
