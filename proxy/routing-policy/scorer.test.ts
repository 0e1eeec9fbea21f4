import { describe, expect, it } from 'vitest';
import type { RequestFeatures } from './features.js';
import { DEFAULT_THRESHOLDS, scoreFeatures, tierOf } from './scorer.js';

/**
 * Clear-cut cases per feature: each signal raises the score where it should and stays quiet
 * where it should not. How well the scorer routes a realistic mix is the routing bench's
 * question (e2e/bench/routing.ts), not these tests'.
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
const tier = (f: RequestFeatures) => tierOf(scoreFeatures(f).score, balanced);
const signals = (f: RequestFeatures) => scoreFeatures(f).signals;

describe('scoreFeatures: simple requests stay Light', () => {
  it.each([
    'What is the capital of Australia?',
    'Translate "good morning" into Spanish.',
    'Fix the grammar: "me and him goes to the store"',
    'Give me three synonyms for "happy".',
    'Write a haiku about autumn leaves.',
    'Summarize this sentence: the meeting moved to Thursday because the room was booked.',
  ])('%s', (prompt) => {
    expect(tier(ask(prompt))).toBe('Light');
  });
});

describe('scoreFeatures: each signal', () => {
  it('code: a stack trace and pasted code', () => {
    const trace =
      'Why does this fail?\nTraceback (most recent call last):\n  File "app.py", line 3, in <module>\n    main()\nKeyError: \'user\'';
    expect(signals(ask(trace))).toContain('code');
    const code = 'Explain this:\n```ts\nexport function f(a: number) {\n  const b = a * 2;\n  return b;\n}\n```';
    expect(signals(ask(code))).toContain('code');
    expect(signals(ask('Tell me about the history of Rome.'))).not.toContain('code');
  });

  it('math: equations, symbols and topics; a date is not an equation', () => {
    expect(signals(ask('Solve 2x + 3 = 11 for x'))).toContain('math');
    expect(signals(ask('Evaluate ∫ x² dx from 0 to 1'))).toContain('math');
    expect(signals(ask('What is the probability of two sixes?'))).toContain('math');
    expect(signals(ask('The meeting is on 2025-03-14 at noon, remind me'))).not.toContain('math');
  });

  it('steps: numbered requirements and constraints', () => {
    const spec =
      'Build the page:\n1. a header\n2. a search box\n3. a results table\n4. pagination\nIt must load in under a second and must not use jQuery.';
    expect(signals(ask(spec))).toContain('steps');
  });

  it('long: from about 2,000 tokens of context', () => {
    expect(signals(ask('summarize', { inputTokens: 1000 }))).not.toContain('long');
    expect(signals(ask('summarize', { inputTokens: 20_000 }))).toContain('long');
    expect(scoreFeatures(ask('q', { inputTokens: 64_000 })).score).toBeGreaterThan(
      scoreFeatures(ask('q', { inputTokens: 4000 })).score,
    );
  });

  it('tools, images, depth, reasoning, json', () => {
    expect(signals(ask('hi', { tools: 2, toolNames: ['a', 'b'] }))).toContain('tools');
    expect(signals(ask('hi', { images: true }))).toContain('images');
    expect(signals(ask('hi', { depth: 12 }))).toContain('depth');
    expect(signals(ask('hi', { reasoning: 'high' }))).toContain('reasoning');
    expect(signals(ask('hi', { reasoning: 'minimal' }))).not.toContain('reasoning');
    expect(signals(ask('hi', { json: true }))).toContain('json');
  });

  it('hard: proofs, system design, concurrency, security go to Frontier', () => {
    for (const prompt of [
      'Prove that there is no simple group of order 132.',
      'Design a multi-region payment ledger that posts each transfer exactly once.',
      'Our worker pool deadlocks under load; find the race condition.',
      'Threat-model a SaaS that runs customer notebooks on shared nodes.',
      'Find all functions f: R -> R such that f(x + y) = f(x) + f(y) + 1.',
    ])
      expect(tier(ask(prompt)), prompt).toBe('Frontier');
  });

  it('the ask of a long prompt is read at its ends, not in the pasted material', () => {
    // The words of a hard task only in the middle of the material, away from both ends.
    const log = Array.from({ length: 400 }, (_, i) =>
      i > 100 && i < 300 ? `09:00:${i % 60} ERROR deadlock detected, race condition` : `09:00:${i % 60} INFO ok`,
    ).join('\n');
    const f = ask(`Count the lines of this log.\n${log}\nThat is all.`);
    expect(signals(f)).not.toContain('hard');
    expect(signals(f)).toContain('long');
  });
});

describe('scoreFeatures: evidence adds up, simple cues damp', () => {
  it('several moderate signals make a Standard request', () => {
    const agent = ask('Add a --verbose flag to the CLI', { tools: 6, depth: 5 });
    expect(tier(agent)).not.toBe('Light');
  });

  it('a long agent session with tools reaches Frontier with a hard ask', () => {
    const session = ask('Refactor the payment module and fix the race condition in the ledger', {
      tools: 6,
      depth: 24,
      inputTokens: 30_000,
    });
    expect(tier(session)).toBe('Frontier');
  });

  it('a simple cue lowers a score, unless strong evidence of difficulty is there', () => {
    const plain = scoreFeatures(ask('Explain these twenty paragraphs about remote work in depth')).score;
    const simple = scoreFeatures(ask('Translate these twenty paragraphs about remote work in depth')).score;
    expect(simple).toBeLessThan(plain);
    expect(tier(ask('Translate this proof that √2 is irrational into French and prove it again'))).toBe('Frontier');
  });

  it('scores stay in 0..1 and name only the signals that raised them', () => {
    const everything = ask(`Prove and design a distributed system step by step:\n1. a\n2. b\n\`\`\`\nx();\n\`\`\``, {
      tools: 30,
      images: true,
      depth: 50,
      reasoning: 'high',
      json: true,
      inputTokens: 500_000,
    });
    const d = scoreFeatures(everything);
    expect(d.score).toBeLessThanOrEqual(1);
    expect(d.score).toBeGreaterThan(0.9);
    expect(scoreFeatures(ask('hello')).signals).toEqual([]);
  });
});

describe('thresholds', () => {
  it('Cost keeps more on Light than Balanced, Quality less', () => {
    const t = DEFAULT_THRESHOLDS;
    expect(t.Cost.standard).toBeGreaterThan(t.Balanced.standard);
    expect(t.Balanced.standard).toBeGreaterThan(t.Quality.standard);
    expect(t.Cost.frontier).toBeGreaterThan(t.Balanced.frontier);
    expect(t.Balanced.frontier).toBeGreaterThan(t.Quality.frontier);
    const moderate = scoreFeatures(ask('Write a Python function that parses a CSV line with quoted fields')).score;
    expect(tierOf(moderate, t.Cost)).toBe('Light');
    expect(tierOf(moderate, t.Quality)).not.toBe('Light');
  });

  it('tierOf: each threshold is the first score of its tier', () => {
    expect(tierOf(0.2, { standard: 0.2, frontier: 0.6 })).toBe('Standard');
    expect(tierOf(0.19, { standard: 0.2, frontier: 0.6 })).toBe('Light');
    expect(tierOf(0.6, { standard: 0.2, frontier: 0.6 })).toBe('Frontier');
  });
});

describe('scoreFeatures: bounded work', () => {
  it('hostile prompts (long runs without breaks, whitespace, near-matches) score fast', () => {
    const prompts = [
      'a'.repeat(8000),
      ' '.repeat(8000),
      '\n'.repeat(8000),
      `<${'a'.repeat(7999)}`,
      `${'Error'.repeat(1600)}`,
      `${'1 + '.repeat(2000)}`,
      `  at ${'x'.repeat(7990)}`,
    ];
    for (const p of prompts) scoreFeatures(ask(p));
    const started = performance.now();
    for (let i = 0; i < 20; i++) for (const p of prompts) scoreFeatures(ask(p));
    const ms = (performance.now() - started) / (20 * prompts.length);
    // A backtracking pattern would take tens of milliseconds or more on 8,000 characters; linear
    // work is about 1 ms at worst here when idle, so this holds on a loaded 2-core machine.
    expect(ms).toBeLessThan(25);
  });
});
