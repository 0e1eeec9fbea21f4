import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { routingExamplesOf } from '../../sources/cluster-source.js';
import { BANK_FILES } from './bank.js';
import { builtInEmbedding } from './static-embedding.js';
import type { ScorerWeights } from './text-scorer.js';
import { embedRows, fitScorer, trainingSet } from './train.js';

/**
 * Trains the learned scorer on the bank, plus a team's own labelled prompts, over the built-in
 * embedding, and writes the weights: weights.json (the shipped default) unless --out says where.
 * The examples file is read as the gateway reads a ConfigMap of examples (entries it would refuse
 * are skipped), and trained as the gateway trains a policy's.
 *
 * npm run routing:train [-- --examples FILE.yaml] [--out FILE]
 *   FILE.yaml: a YAML list of {tier: Light|Standard|Frontier, prompt}.
 */

const { values } = parseArgs({ options: { examples: { type: 'string' }, out: { type: 'string' } } });
const here = fileURLToPath(new URL('./', import.meta.url));
const examples = values.examples ? routingExamplesOf(readFileSync(values.examples, 'utf8')) : [];
const rows = trainingSet(examples);
const embedding = builtInEmbedding();
const started = performance.now();
const weights: ScorerWeights = {
  embedding: embedding.name,
  trainedOn: {
    bank: BANK_FILES.reduce((h, f) => h.update(readFileSync(`${here}${f}`)), createHash('sha256')).digest('hex'),
    prompts: rows.length - examples.length,
    examples: examples.length,
  },
  ...(await fitScorer(rows, await embedRows(rows, embedding))),
};
const out = values.out ?? `${here}weights.json`;
writeFileSync(out, `${JSON.stringify(weights)}\n`);
console.log(
  `trained on ${rows.length} prompts (${examples.length} examples) in ${Math.round(performance.now() - started)} ms: ${out}`,
);
