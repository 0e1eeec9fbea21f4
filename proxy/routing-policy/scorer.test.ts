import { describe, expect, it } from 'vitest';
import { growth } from '../../e2e/support/growth.js';
import type { RequestFeatures } from './features.js';
import { builtInScorer, ClassifierScorer, embeddingInput, shippedWeights } from './learned/text-scorer.js';
import { DEFAULT_THRESHOLDS, scoreRequest, tierOf } from './scorer.js';

/**
 * Clear-cut cases, written here, none of them in the bank the classifier was trained on: the
 * words the keyword scorer misread stay Light, competition math reaches Frontier, and each shape
 * signal raises the score. How well the scorer routes public benchmarks it was not trained on is
 * the routing bench's question (leave-one-source-out: e2e/bench/routing.ts), not these tests'.
 */

const ask = (prompt: string, more: Partial<RequestFeatures> = {}): RequestFeatures => ({
  inputTokens: Math.ceil(prompt.length / 4),
  tools: 0,
  toolNames: [],
  images: false,
  depth: 1,
  json: false,
  prompt,
  ...more,
});
const balanced = DEFAULT_THRESHOLDS.Balanced;
const scored = (f: RequestFeatures) => scoreRequest(f, builtInScorer().score(f.prompt));
const tier = (f: RequestFeatures) => tierOf(scored(f).score, balanced);

describe('the learned scorer: what words cannot prove', () => {
  it.each([
    'Who killed the former Japanese Prime Minister Shinzo Abe?',
    'How many books are in the Harry Potter series?',
    'Write a script for a YouTube video about making sourdough bread at home.',
    'What is the capital of Australia?',
    'Write a haiku about autumn leaves.',
  ])('%s stays Light', (prompt) => {
    expect(tier(ask(prompt))).toBe('Light');
  });

  it.each([
    'Compute the sum of all positive integers k such that k^2 - 19k + 99 is a perfect square.',
    'Find all functions f: R -> R such that f(x + f(y)) = f(x) + y for all real x, y.',
    'Let $n$ be a positive integer such that $n^2 + 2n + 2023$ is a perfect square. Find the sum of all such $n$.',
  ])('competition math reaches Frontier: %s', (prompt) => {
    expect(tier(ask(prompt))).toBe('Frontier');
  });

  it("an agent hook's payload is not read as a puzzle: its identifiers are left out of what is embedded", () => {
    const payload = JSON.stringify({
      session_id: '2c6e7918-3ef9-4c5e-8fba-d092bee372c5',
      transcript_path: '/home/dev/.claude/projects/-srv-app/2c6e7918-3ef9-4c5e-8fba-d092bee372c5.jsonl',
      hook_event_name: 'PreToolUse',
      tool_name: 'Bash',
      tool_input: { command: 'echo ok' },
      tool_use_id: 'toolu_bdrk_730p1ixznz',
    });
    expect(embeddingInput(payload)).not.toMatch(/2c6e7918|toolu_bdrk|\.claude/);
    expect(tier(ask(`The command only prints text: ${payload}`))).not.toBe('Frontier');
  });

  it('an ordinary programming task needs at least Standard', () => {
    expect(
      tier(ask('Write a Python function that returns the n-th Fibonacci number using memoization, with tests.')),
    ).not.toBe('Light');
  });

  it('without an embedding, the features-only classifier still scores, and says so', () => {
    const w = shippedWeights();
    const features = new ClassifierScorer({ learned: w.learned, features: w.features });
    const math = features.score('Compute the sum of all positive integers k such that $k^2 - 19k + 99$ is a square.');
    expect(math.by).toBe('features');
    expect(math.score).toBeGreaterThan(features.score('What is the capital of Australia?').score);
    expect(builtInScorer().score('hi').by).toBe('learned');
  });
});

describe('the request shape adds evidence', () => {
  it('a long context, tools, images, an agent loop, reasoning and JSON each raise the score and are named', () => {
    const base = scored(ask('Summarize it.'));
    for (const [name, more] of [
      ['long', { inputTokens: 64_000 }],
      ['tools', { tools: 3, toolNames: ['a', 'b', 'c'] }],
      ['images', { images: true }],
      ['depth', { depth: 10, tools: 1, toolNames: ['a'] }],
      ['reasoning', { reasoning: 'high' }],
      ['json', { json: true }],
    ] as const) {
      const d = scored(ask('Summarize it.', more));
      expect(d.score, name).toBeGreaterThan(base.score);
      expect(d.signals, name).toContain(name);
    }
    expect(base.signals).toEqual(['learned']);
  });

  it('tierOf: each threshold is the first score of its tier; Cost needs more than Balanced, Quality less', () => {
    expect(tierOf(0.2, { standard: 0.2, frontier: 0.6 })).toBe('Standard');
    expect(tierOf(0.19, { standard: 0.2, frontier: 0.6 })).toBe('Light');
    expect(tierOf(0.6, { standard: 0.2, frontier: 0.6 })).toBe('Frontier');
    const t = DEFAULT_THRESHOLDS;
    expect(t.Cost.standard).toBeGreaterThan(t.Balanced.standard);
    expect(t.Quality.frontier).toBeLessThan(t.Balanced.frontier);
  });
});

describe('bounded work', () => {
  it('hostile prompts (long runs without breaks, whitespace, near-matches, unknown scripts) score in linear time', () => {
    const hostile: Array<(n: number) => string> = [
      (n) => 'a'.repeat(n),
      (n) => ' '.repeat(n),
      (n) => '\n'.repeat(n),
      (n) => `<${'a'.repeat(n - 1)}`,
      (n) => '1 + '.repeat(n / 4),
      (n) => `  at ${'x'.repeat(n - 10)}`,
      (n) => '𝔘'.repeat(n / 2),
      (n) => 'é\u0301'.repeat(Math.floor(n / 3)),
    ];
    for (const make of hostile) {
      // 8x the text: linear work is at most about 8x slower (less, where the scorer reads a head
      // of it); a backtracking pattern is 64x and worse. The time itself is the routing bench's.
      const ratio = growth(
        (n) => {
          const request = ask(make(n));
          return () => scored(request);
        },
        1000,
        8000,
      );
      expect(ratio, make(12)).toBeLessThan(24);
    }
  });
});
