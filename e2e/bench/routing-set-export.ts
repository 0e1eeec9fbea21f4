import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { featuresOf, scoredText } from '../../proxy/routing-policy/features.js';
import { labelledSet } from './routing-set.js';

/**
 * Writes the hand-written set's texts into the learned scorer's bank as the source `hand-written`
 * (proxy/routing-policy/learned/hand-written.jsonl): the text the scorer reads of each request,
 * with its label. The one source of the bank written here; the routing bench holds it out when
 * it judges it, as every other source.
 *
 * npx tsx e2e/bench/routing-set-export.ts   (npm run routing:bank)
 */

const TIER = { light: 'Light', standard: 'Standard', frontier: 'Frontier' } as const;
const out = fileURLToPath(new URL('../../proxy/routing-policy/learned/hand-written.jsonl', import.meta.url));
const lines = labelledSet().map((r) =>
  JSON.stringify({ source: 'hand-written', tier: TIER[r.tier], prompt: scoredText(featuresOf(r.dialect, r.body)) }),
);
writeFileSync(out, `${lines.join('\n')}\n`);
console.log(`${lines.length} prompts: ${out}`);
