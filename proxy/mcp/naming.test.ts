import { describe, expect, it } from 'vitest';
import { federatedNaming, singleNaming } from './naming.js';

describe('federated names', () => {
  it('prefixes names with <server>_ and URIs with <server>+, and finds the server again', () => {
    expect(federatedNaming.name('github', 'search_issues')).toBe('github_search_issues');
    expect(federatedNaming.parseName('github_search_issues')).toMatchObject({
      server: 'github',
      name: 'search_issues',
    });
    expect(federatedNaming.uri('docs', 'file:///a+b.md')).toBe('docs+file:///a+b.md');
    expect(federatedNaming.parseUri('docs+file:///a+b.md')).toMatchObject({ server: 'docs', uri: 'file:///a+b.md' });
    // A valid URI still: "<server>+<scheme>" is a scheme.
    expect(() => new URL(federatedNaming.uri('code-search', 'demo://resource/1'))).not.toThrow();
  });

  it('refuses names that are not one of its own', () => {
    for (const bad of ['echo', '_echo', 'github_', 'Git_hub', 'a b_c', '-x_y']) {
      expect(federatedNaming.parseName(bad)).toBeUndefined();
    }
  });
});

describe('single-server names', () => {
  it('are the server’s own', () => {
    const n = singleNaming('everything');
    expect(n.name('everything', 'get-sum')).toBe('get-sum');
    expect(n.parseName('get_sum')).toEqual({ server: 'everything', name: 'get_sum' });
    expect(n.parseUri('demo://x')).toEqual({ server: 'everything', uri: 'demo://x' });
  });
});
