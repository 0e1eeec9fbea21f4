import type { RoutingExample } from '../../../crds/routing-policy.js';
import { bankPrompts } from './bank.js';
import { type LabelledVector, train } from './classifier.js';
import type { TextEmbedding } from './static-embedding.js';
import { embeddingInput, inputOf, type ScorerWeights } from './text-scorer.js';

/**
 * How the learned scorer's two classifiers (over the embedding and the measured features; over
 * the measured features alone) are trained on the bank plus a team's own labelled prompts: by the
 * gateway, in-process, for a policy with examples or an embedding model of its own
 * (proxy/routing-policy/policies.ts), by `npm run routing:train` for the shipped weights
 * (train-command.ts), and by the routing bench for each source held out.
 */

/** A team's examples count this many times their source's share: a few of them must move the boundary. */
const EXAMPLE_WEIGHT = 3;
const TRAINING = { epochs: 300, l2: 0.03, rate: 0.05 } as const;
/** Texts embedded between two turns of the event loop (the built-in embedding: well under 10 ms). */
const EMBED_TURN = 64;

export interface Labelled {
  source: string;
  tier: RoutingExample['tier'];
  prompt: string;
  weight?: number;
}

/** A team's examples as training rows: a source of their own, weighted up. */
export const exampleRows = (examples: readonly RoutingExample[]): Labelled[] =>
  examples.map((e) => ({ source: 'examples', tier: e.tier, prompt: e.prompt, weight: EXAMPLE_WEIGHT }));

/** The bank and the examples as training rows. */
export const trainingSet = (examples: readonly RoutingExample[] = []): Labelled[] => [
  ...bankPrompts(),
  ...exampleRows(examples),
];

/** The rows' texts embedded in-process, giving the event loop back every EMBED_TURN texts. */
export async function embedRows(rows: readonly Labelled[], embedding: TextEmbedding): Promise<Float32Array[]> {
  const out: Float32Array[] = [];
  for (const r of rows) {
    out.push(embedding.embed(embeddingInput(r.prompt)));
    if (out.length % EMBED_TURN === 0) await new Promise((resolve) => setImmediate(resolve));
  }
  return out;
}

const labelled = (rows: readonly Labelled[], x: (r: Labelled, i: number) => Float32Array): LabelledVector[] =>
  rows.map((r, i) => ({ x: x(r, i), tier: r.tier, source: r.source, ...(r.weight ? { weight: r.weight } : {}) }));

/** Both classifiers, from rows and their vectors (same order). */
export async function fitScorer(
  rows: readonly Labelled[],
  vectors: readonly Float32Array[],
): Promise<Pick<ScorerWeights, 'learned' | 'features'>> {
  return {
    learned: await train(
      labelled(rows, (r, i) => inputOf(vectors[i], r.prompt)),
      TRAINING,
    ),
    features: await train(
      labelled(rows, (r) => inputOf(undefined, r.prompt)),
      TRAINING,
    ),
  };
}
