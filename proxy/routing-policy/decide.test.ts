import { describe, expect, it } from 'vitest';
import { baselineOf, decide, degradeTo, outputCap, type PoolModel } from './decide.js';
import type { RequestFeatures } from './features.js';

/** The decision as a pure function: constraints first, then the tier needed, then the cheapest. */

const f = (over: Partial<RequestFeatures> = {}): RequestFeatures => ({
  inputTokens: 100,
  tools: 0,
  toolNames: [],
  images: false,
  depth: 1,
  json: false,
  prompt: 'hi',
  ...over,
});

const m = (name: string, tier: PoolModel['tier'], input: number, over: Partial<PoolModel> = {}): PoolModel => ({
  name,
  tier,
  price: { input, output: input * 4 },
  inCluster: false,
  tools: true,
  images: true,
  reasoning: true,
  ...over,
});

const POOL: PoolModel[] = [
  m('small', 'Light', 0.05, { inCluster: true, contextWindow: 8192, images: false, reasoning: false }),
  m('mini', 'Standard', 0.25),
  m('mini-b', 'Standard', 0.4),
  m('big', 'Frontier', 1.25),
  m('bigger', 'Frontier', 5),
];
const all = () => true;

describe('decide', () => {
  it('takes the cheapest model of the tier needed, and ladders up one model per tier', () => {
    expect(decide(POOL, { features: f(), need: 'Light', usable: all })).toEqual({
      model: 'small',
      tier: 'Light',
      reason: 'score',
      ladder: ['mini', 'big'],
    });
    expect(decide(POOL, { features: f(), need: 'Standard', usable: all })).toMatchObject({
      model: 'mini',
      ladder: ['big'],
    });
    expect(decide(POOL, { features: f(), need: 'Frontier', usable: all })).toMatchObject({ model: 'big', ladder: [] });
  });

  it('moves up past models that cannot take the request, and says it was the constraints', () => {
    const long = decide(POOL, { features: f({ inputTokens: 9000 }), need: 'Light', usable: all });
    expect(long).toMatchObject({ model: 'mini', reason: 'constraints' });
    expect(decide(POOL, { features: f({ images: true }), need: 'Light', usable: all })).toMatchObject({
      model: 'mini',
      reason: 'constraints',
    });
    expect(decide(POOL, { features: f({ reasoning: 'high' }), need: 'Light', usable: all })?.model).toBe('mini');
    // A low effort is answered by any model.
    expect(decide(POOL, { features: f({ reasoning: 'low' }), need: 'Light', usable: all })?.model).toBe('small');
  });

  it('skips models the key may not call or that take no traffic now', () => {
    const d = decide(POOL, { features: f(), need: 'Light', usable: (n) => n !== 'small' && n !== 'mini' });
    expect(d).toMatchObject({ model: 'mini-b' });
    expect(decide(POOL, { features: f(), need: 'Light', usable: () => false })).toBeUndefined();
  });

  it('keeps a named model when nothing cheaper serves as well, and never goes above it', () => {
    const named = { name: 'mini', price: { input: 0.25, output: 1 }, tier: 'Standard' as const };
    expect(decide(POOL, { features: f(), need: 'Light', named, usable: all })).toMatchObject({
      model: 'small',
      ladder: ['mini'],
    });
    expect(decide(POOL, { features: f(), need: 'Frontier', named, usable: all })).toEqual({
      model: 'mini',
      tier: 'Standard',
      reason: 'kept',
      ladder: [],
    });
    // A named model outside the pool is a Frontier-class choice: cheaper pool models below it may
    // serve, and a failed answer goes to the caller's own choice, not to another model of its class.
    const outside = { name: 'gpt-x', price: { input: 2, output: 8 } };
    expect(decide(POOL, { features: f(), need: 'Standard', named: outside, usable: all })).toMatchObject({
      model: 'mini',
      ladder: ['gpt-x'],
    });
  });

  it("asks the window for room for an answer, not for an agent's whole maximum, and caps that maximum", () => {
    // Claude Code's small-model calls ask for 32,000 tokens: an 8k model still takes a short prompt.
    const agent = f({ maxOutputTokens: 32_000 });
    expect(decide(POOL, { features: agent, need: 'Light', usable: all })?.model).toBe('small');
    expect(outputCap(POOL[0], agent)).toBe(8192 - 110);
    expect(outputCap(POOL[0], f({ maxOutputTokens: 100 }))).toBeUndefined();
    expect(outputCap(POOL[1], agent)).toBeUndefined();
    // A long input leaves too little room for an answer.
    expect(
      decide(POOL, { features: f({ inputTokens: 6000, maxOutputTokens: 32_000 }), need: 'Light', usable: all })?.model,
    ).toBe('mini');
  });

  it('degrades to the cheapest in-cluster model that fits, and counts savings against the top model', () => {
    expect(degradeTo(POOL, f(), all)?.name).toBe('small');
    expect(degradeTo(POOL, f({ images: true }), all)).toBeUndefined();
    expect(baselineOf(POOL, undefined, f())).toBe('bigger');
  });
  it('never refuses on a preference: a pool without a reasoning model serves high effort on its strongest model that fits, and says so', () => {
    const llamas = [
      m('llama-1b', 'Light', 0, { inCluster: true, reasoning: false }),
      m('llama-8b', 'Standard', 0.1, { reasoning: false }),
      m('llama-70b', 'Frontier', 0.6, { reasoning: false }),
    ];
    const d = decide(llamas, { features: f({ reasoning: 'high' }), need: 'Frontier', usable: all });
    expect(d).toMatchObject({ model: 'llama-70b', tier: 'Frontier' });
    expect(d?.unmet).toMatch(/reasons at high effort/);
    // A light request too: the preference moves it to the highest tier that fits.
    expect(decide(llamas, { features: f({ reasoning: 'high' }), need: 'Light', usable: all })?.model).toBe('llama-70b');
    // A hard constraint still refuses: no model of the pool takes images.
    const blind = llamas.map((x) => ({ ...x, images: false }));
    expect(
      decide(blind, { features: f({ reasoning: 'high', images: true }), need: 'Light', usable: all }),
    ).toBeUndefined();
  });
});
