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
});
