import type { RoutingObjective, RoutingTier } from '../../crds/routing-policy.js';
import { type BankPrompt, bankPrompts, bankSources } from '../../proxy/routing-policy/learned/bank.js';
import { builtInEmbedding } from '../../proxy/routing-policy/learned/static-embedding.js';
import { ClassifierScorer } from '../../proxy/routing-policy/learned/text-scorer.js';
import { embedRows, fitScorer } from '../../proxy/routing-policy/learned/train.js';
import { DEFAULT_THRESHOLDS, tierOf } from '../../proxy/routing-policy/scorer.js';

/**
 * The learned scorer judged on sources it was not trained on: for each source of the bank
 * (proxy/routing-policy/learned/sources.json, the hand-written set among them), a classifier
 * trained on every other source scores that source's prompts (leave-one-source-out), and the
 * objectives' default thresholds turn the scores into tiers. Savings are against sending every
 * prompt to the Frontier model, at the catalog's prices of the bench's pool (Light in-cluster at
 * $0, gpt-5-mini, gpt-5) for the prompt's estimated tokens and OUTPUT_TOKENS of answer.
 */

const TIERS: readonly RoutingTier[] = ['Light', 'Standard', 'Frontier'];
const RANK: Record<RoutingTier, number> = { Light: 0, Standard: 1, Frontier: 2 };
const PRICES: Record<RoutingTier, { input: number; output: number }> = {
  Light: { input: 0, output: 0 },
  Standard: { input: 0.25, output: 2 },
  Frontier: { input: 1.25, output: 10 },
};
const OUTPUT_TOKENS = 512;
const usd = (tier: RoutingTier, prompt: string) =>
  (Math.ceil(prompt.length / 4) * PRICES[tier].input + OUTPUT_TOKENS * PRICES[tier].output) / 1e6;

export interface Scored extends BankPrompt {
  puzzle: boolean;
  /** The held-out text score. */
  score: number;
}

/** Every bank prompt with the score of a classifier trained without its source. */
export async function heldOutScores(): Promise<Scored[]> {
  const bank = bankPrompts();
  const embedding = builtInEmbedding();
  const vectors = await embedRows(bank, embedding);
  const puzzles = new Set(
    bankSources()
      .filter((s) => s.puzzle)
      .map((s) => s.id),
  );
  const out: Scored[] = [];
  for (const source of new Set(bank.map((p) => p.source))) {
    const train = bank.map((p, i) => ({ p, v: vectors[i] as Float32Array })).filter((x) => x.p.source !== source);
    const scorer = new ClassifierScorer(
      await fitScorer(
        train.map((x) => x.p),
        train.map((x) => x.v),
      ),
      embedding,
    );
    bank.forEach((p, i) => {
      if (p.source === source)
        out.push({ ...p, puzzle: puzzles.has(source), score: scorer.score(p.prompt, vectors[i]).score });
    });
  }
  return out;
}

export interface Row {
  set: string;
  policy: string;
  prompts: number;
  'under %': number;
  'over %': number;
  'agree %': number;
  'frontier→Frontier %': number;
  'savings %': number;
}

const pct = (n: number, of: number) => (of === 0 ? 0 : Math.round((1000 * n) / of) / 10);

/** One row: `route` gives each prompt's tier. */
export function rowOf(set: string, policy: string, prompts: readonly Scored[], route: (s: Scored) => RoutingTier): Row {
  let under = 0;
  let over = 0;
  let frontier = 0;
  let frontierRouted = 0;
  let cost = 0;
  let all = 0;
  for (const p of prompts) {
    const t = route(p);
    const d = RANK[t] - RANK[p.tier];
    if (d < 0) under++;
    if (d > 0) over++;
    if (p.tier === 'Frontier') {
      frontier++;
      if (t === 'Frontier') frontierRouted++;
    }
    cost += usd(t, p.prompt);
    all += usd('Frontier', p.prompt);
  }
  return {
    set,
    policy,
    prompts: prompts.length,
    'under %': pct(under, prompts.length),
    'over %': pct(over, prompts.length),
    'agree %': pct(prompts.length - under - over, prompts.length),
    'frontier→Frontier %': pct(frontierRouted, frontier),
    'savings %': all === 0 ? 0 : Math.round(1000 * (1 - cost / all)) / 10,
  };
}

export const byObjective = (o: RoutingObjective) => (s: Scored) => tierOf(s.score, DEFAULT_THRESHOLDS[o]);
export const OBJECTIVES: readonly RoutingObjective[] = ['Cost', 'Balanced', 'Quality'];

/** Per objective and constant policy, over all prompts and without the puzzle-like sources. */
export function summary(scored: readonly Scored[]): Row[] {
  const sets: Array<[string, readonly Scored[]]> = [
    ['all', scored],
    ['no puzzles', scored.filter((s) => !s.puzzle)],
  ];
  return sets.flatMap(([name, set]) => [
    ...OBJECTIVES.map((o) => rowOf(name, o, set, byObjective(o))),
    ...TIERS.map((t) => rowOf(name, `all ${t}`, set, () => t)),
    rowOf(name, 'labels (oracle)', set, (s) => s.tier),
  ]);
}

/**
 * The best a router that does not read the prompt can do at `savings`: a random mix of two
 * constant policies (all Light, all Standard, all Frontier) that saves exactly as much. A constant
 * policy alone can never be matched on savings by a router (only all Light saves 100 %), so this
 * cost-matched mix is the fair floor RouteLLM-style evaluations compare a router with.
 */
export function costMatchedConstant(
  rows: readonly Row[],
  set: string,
  savings: number,
): { mix: string; under: number } {
  const points = TIERS.map((t) => rows.find((r) => r.set === set && r.policy === `all ${t}`) as Row);
  let best = { mix: 'none', under: Number.POSITIVE_INFINITY };
  for (const a of points)
    for (const b of points) {
      const [sa, sb] = [a['savings %'], b['savings %']];
      if (!(sa >= savings && savings >= sb) || sa === sb) continue;
      const share = (savings - sb) / (sa - sb);
      const under = Math.round(10 * (share * a['under %'] + (1 - share) * b['under %'])) / 10;
      if (under < best.under) best = { mix: `${Math.round(100 * share)} % ${a.policy}, rest ${b.policy}`, under };
    }
  return best;
}

/** Per source under Balanced: what it was routed to. */
export function perSource(scored: readonly Scored[], objective: RoutingObjective = 'Balanced') {
  const route = byObjective(objective);
  return [...new Set(scored.map((s) => s.source))].map((source) => {
    const list = scored.filter((s) => s.source === source);
    const served = (t: RoutingTier) => list.filter((s) => route(s) === t).length;
    const row = rowOf(source, objective, list, route);
    return {
      source,
      label: [...new Set(list.map((s) => s.tier))].join('/'),
      prompts: list.length,
      Light: served('Light'),
      Standard: served('Standard'),
      Frontier: served('Frontier'),
      'under %': row['under %'],
      'over %': row['over %'],
      'savings %': row['savings %'],
    };
  });
}

/** Rows: the label; columns: the tier routed to. */
export function confusion(scored: readonly Scored[], objective: RoutingObjective) {
  const route = byObjective(objective);
  return TIERS.map((label) => {
    const list = scored.filter((s) => s.tier === label);
    return {
      objective,
      label,
      '→ Light': list.filter((s) => route(s) === 'Light').length,
      '→ Standard': list.filter((s) => route(s) === 'Standard').length,
      '→ Frontier': list.filter((s) => route(s) === 'Frontier').length,
    };
  });
}
