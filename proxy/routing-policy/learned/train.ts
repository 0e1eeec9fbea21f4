import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { load } from 'js-yaml';
import { ROUTING_TIERS, type RoutingExample } from '../../../crds/routing-policy.js';
import { BANK_FILES, bankPrompts } from './bank.js';
import { type LabelledVector, train, trainInTurns } from './classifier.js';
import { builtInEmbedding, type TextEmbedding } from './static-embedding.js';
import { inputOf, type ScorerWeights } from './text-scorer.js';

/**
 * Trains the learned scorer's two classifiers (over the embedding and the measured features; over
 * the measured features alone) on the bank, plus a team's own labelled prompts, and writes
 * weights.json. The gateway trains the same way, in-process, for a policy with examples or an
 * embedding model of its own (proxy/routing-policy/policies.ts); this command is for the shipped
 * default and for a team that wants to read its classifier before it goes live.
 *
 * npm run routing:train [-- --examples FILE.yaml] [--out FILE]
 *   FILE.yaml: a YAML list of {tier: Light|Standard|Frontier, prompt} (the ConfigMap's format).
 */

/** A team's examples count this many times their source's share: a few of them must move the boundary. */
export const EXAMPLE_WEIGHT = 3;
export const TRAINING = { epochs: 300, l2: 0.03, rate: 0.05 } as const;

export interface Labelled {
  source: string;
  tier: RoutingExample['tier'];
  prompt: string;
  weight?: number;
}

/** The bank and the examples as training rows. */
export function trainingSet(examples: readonly RoutingExample[] = []): Labelled[] {
  return [
    ...bankPrompts(),
    ...examples.map((e) => ({ source: 'examples', tier: e.tier, prompt: e.prompt, weight: EXAMPLE_WEIGHT })),
  ];
}

const labelled = (rows: readonly Labelled[], x: (r: Labelled, i: number) => Float32Array): LabelledVector[] =>
  rows.map((r, i) => ({ x: x(r, i), tier: r.tier, source: r.source, ...(r.weight ? { weight: r.weight } : {}) }));

/** Both classifiers, from rows and their vectors (same order). */
export function fitScorer(
  rows: readonly Labelled[],
  vectors: readonly Float32Array[],
): Pick<ScorerWeights, 'learned' | 'features'> {
  return {
    learned: train(
      labelled(rows, (r, i) => inputOf(vectors[i], r.prompt)),
      TRAINING,
    ),
    features: train(
      labelled(rows, (r) => inputOf(undefined, r.prompt)),
      TRAINING,
    ),
  };
}

/** fitScorer in turns of the event loop: the gateway's own training of a policy's classifier. */
export async function fitScorerInTurns(
  rows: readonly Labelled[],
  vectors: readonly Float32Array[],
): Promise<Pick<ScorerWeights, 'learned' | 'features'>> {
  return {
    learned: await trainInTurns(
      labelled(rows, (r, i) => inputOf(vectors[i], r.prompt)),
      TRAINING,
    ),
    features: await trainInTurns(
      labelled(rows, (r) => inputOf(undefined, r.prompt)),
      TRAINING,
    ),
  };
}

export function parseExamples(yaml: string): RoutingExample[] {
  const list = load(yaml);
  if (!Array.isArray(list)) throw new Error('examples: a YAML list of {tier, prompt}');
  return list.map((e, i) => {
    const { tier, prompt } = (e ?? {}) as { tier?: unknown; prompt?: unknown };
    if (!ROUTING_TIERS.includes(tier as RoutingExample['tier']) || typeof prompt !== 'string' || prompt === '')
      throw new Error(`examples[${i}]: tier must be one of ${ROUTING_TIERS.join(', ')} and prompt a non-empty string`);
    return { tier: tier as RoutingExample['tier'], prompt };
  });
}

function main(): void {
  const { values } = parseArgs({ options: { examples: { type: 'string' }, out: { type: 'string' } } });
  const here = fileURLToPath(new URL('./', import.meta.url));
  const examples = values.examples ? parseExamples(readFileSync(values.examples, 'utf8')) : [];
  const rows = trainingSet(examples);
  const embedding: TextEmbedding = builtInEmbedding();
  const started = performance.now();
  const fitted = fitScorer(
    rows,
    rows.map((r) => embedding.embed(r.prompt)),
  );
  const weights: ScorerWeights = {
    embedding: embedding.name,
    trainedOn: {
      bank: BANK_FILES.reduce((h, f) => h.update(readFileSync(`${here}${f}`)), createHash('sha256')).digest('hex'),
      prompts: rows.length - examples.length,
      examples: examples.length,
    },
    ...fitted,
  };
  const out = values.out ?? `${here}weights.json`;
  writeFileSync(out, `${JSON.stringify(weights)}\n`);
  console.log(`trained on ${rows.length} prompts in ${Math.round(performance.now() - started)} ms: ${out}`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) main();
