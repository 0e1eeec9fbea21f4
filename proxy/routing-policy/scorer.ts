import type { RoutingObjective, RoutingTier } from '../../crds/routing-policy.js';
import type { RequestFeatures } from './features.js';
import type { TextScoreKind } from './learned/text-scorer.js';

/**
 * A RoutingPolicy's difficulty score, 0..1: what the prompt's text says (the learned classifier,
 * proxy/routing-policy/learned/), combined with what the request's shape proves (a long context,
 * tools, images, an agent loop under way, reasoning or JSON asked) as independent evidence:
 * 1 - (1 - text) x the product of (1 - each shape contribution). The shape's contributions are
 * this file's table, not learned: the bank's prompts are single turns without tools, so nothing
 * there could teach them. No word list decides: a word proves nothing alone.
 */

export interface Difficulty {
  /** 0..1. */
  score: number;
  /** What raised it: `learned` or `features` (which text classifier), then the shape's signals. */
  signals: readonly string[];
}

/**
 * From which score a request needs Standard and Frontier, per objective. The score is the
 * classifier's expected tier (P(Standard) / 2 + P(Frontier)): Balanced moves up where that
 * expectation passes the middle of each step, less one step's fifth toward caution; Cost needs
 * more evidence, Quality less. Measured leave-one-source-out by the routing bench.
 */
export const DEFAULT_THRESHOLDS: Readonly<Record<RoutingObjective, { standard: number; frontier: number }>> = {
  Cost: { standard: 0.35, frontier: 0.65 },
  Balanced: { standard: 0.2, frontier: 0.5 },
  Quality: { standard: 0.15, frontier: 0.4 },
};

export function tierOf(score: number, thresholds: { standard: number; frontier: number }): RoutingTier {
  if (score >= thresholds.frontier) return 'Frontier';
  return score >= thresholds.standard ? 'Standard' : 'Light';
}

/** Each shape signal: what it reads, and its contribution at each step. */
export interface ShapeSignal {
  name: string;
  /** For the docs: when it fires and how much it adds. */
  rule: string;
  contribution(f: RequestFeatures): number;
}

/** Beyond ~2,000 tokens of context a small model's answers degrade; each doubling adds evidence. */
const LONG = { from: 2000, first: 0.1, perDoubling: 0.1, max: 0.45 } as const;
const TOOLS = { few: 0.2, many: 0.3, manyFrom: 8 } as const;
const IMAGES = 0.3;
/** Turns of the conversation: from each count, a contribution. */
const DEPTH: ReadonlyArray<readonly [turns: number, contribution: number]> = [
  [3, 0.1],
  [8, 0.2],
  [20, 0.3],
];
/** Eight turns and more of tool calls: a long multi-step agent task, the kind a small model loses track of. */
const AGENT_SESSION = { depth: 8, contribution: 0.4 } as const;
const REASONING: Record<NonNullable<RequestFeatures['reasoning']>, number> = {
  minimal: 0,
  low: 0.1,
  medium: 0.25,
  high: 0.5,
};
const JSON_ASKED = 0.15;

function longOf(inputTokens: number): number {
  if (inputTokens < LONG.from) return 0;
  return Math.min(LONG.max, LONG.first + LONG.perDoubling * Math.log2(inputTokens / LONG.from));
}
const depthOf = (depth: number): number => DEPTH.reduce((c, [turns, v]) => (depth >= turns ? v : c), 0);

/** The signals and their rules, each rule written from the same constants the contribution reads. */
export const SHAPE_SIGNALS: readonly ShapeSignal[] = [
  {
    name: 'long',
    rule: `${LONG.from.toLocaleString('en')} input tokens and more: ${LONG.first}, and ${LONG.perDoubling} more for each doubling, at most ${LONG.max}`,
    contribution: (f) => longOf(f.inputTokens),
  },
  {
    name: 'tools',
    rule: `1-${TOOLS.manyFrom - 1} tools offered: ${TOOLS.few}; ${TOOLS.manyFrom} and more: ${TOOLS.many}`,
    contribution: (f) => (f.tools === 0 ? 0 : f.tools < TOOLS.manyFrom ? TOOLS.few : TOOLS.many),
  },
  { name: 'images', rule: `an image in the conversation: ${IMAGES}`, contribution: (f) => (f.images ? IMAGES : 0) },
  {
    name: 'depth',
    rule: `${DEPTH.map(([turns, v]) => `${turns} turns and more: ${v}`).join('; ')}; with tools, ${AGENT_SESSION.depth} turns and more: ${AGENT_SESSION.contribution} (an agent loop)`,
    contribution: (f) =>
      f.tools > 0 && f.depth >= AGENT_SESSION.depth ? AGENT_SESSION.contribution : depthOf(f.depth),
  },
  {
    name: 'reasoning',
    rule: `reasoning effort asked: ${Object.entries(REASONING)
      .filter(([, v]) => v > 0)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}`,
    contribution: (f) => (f.reasoning ? REASONING[f.reasoning] : 0),
  },
  { name: 'json', rule: `JSON output asked: ${JSON_ASKED}`, contribution: (f) => (f.json ? JSON_ASKED : 0) },
];

/** The request's difficulty from its text's score and its shape. */
export function scoreRequest(f: RequestFeatures, text: { score: number; by: TextScoreKind }): Difficulty {
  let keep = 1 - Math.min(1, Math.max(0, text.score));
  const signals: string[] = [text.by];
  for (const s of SHAPE_SIGNALS) {
    const c = s.contribution(f);
    if (c <= 0) continue;
    keep *= 1 - c;
    signals.push(s.name);
  }
  return { score: Math.round((1 - keep) * 1000) / 1000, signals };
}
