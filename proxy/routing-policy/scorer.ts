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

/** Beyond ~2,000 tokens of context a small model's answers degrade; each doubling adds evidence, up to 0.45. */
function longOf(inputTokens: number): number {
  if (inputTokens < 2000) return 0;
  return Math.min(0.45, 0.1 + 0.1 * Math.log2(inputTokens / 2000));
}
const depthOf = (depth: number): number => (depth < 3 ? 0 : depth < 8 ? 0.1 : depth < 20 ? 0.2 : 0.3);
/** Eight turns and more of tool calls: a long multi-step agent task, the kind a small model loses track of. */
const AGENT_SESSION = { depth: 8, contribution: 0.4 } as const;
const REASONING: Record<NonNullable<RequestFeatures['reasoning']>, number> = {
  minimal: 0,
  low: 0.1,
  medium: 0.25,
  high: 0.5,
};

export const SHAPE_SIGNALS: readonly ShapeSignal[] = [
  {
    name: 'long',
    rule: '2,000 input tokens and more: 0.1, and 0.1 more for each doubling, at most 0.45',
    contribution: (f) => longOf(f.inputTokens),
  },
  {
    name: 'tools',
    rule: '1-7 tools offered: 0.2; 8 and more: 0.3',
    contribution: (f) => (f.tools === 0 ? 0 : f.tools < 8 ? 0.2 : 0.3),
  },
  { name: 'images', rule: 'an image in the conversation: 0.3', contribution: (f) => (f.images ? 0.3 : 0) },
  {
    name: 'depth',
    rule: '3-7 turns: 0.1; 8-19: 0.2; 20 and more: 0.3; with tools, 8 turns and more: 0.4 (an agent loop)',
    contribution: (f) =>
      f.tools > 0 && f.depth >= AGENT_SESSION.depth ? AGENT_SESSION.contribution : depthOf(f.depth),
  },
  {
    name: 'reasoning',
    rule: 'reasoning effort asked: low 0.1, medium 0.25, high 0.5',
    contribution: (f) => (f.reasoning ? REASONING[f.reasoning] : 0),
  },
  { name: 'json', rule: 'JSON output asked: 0.15', contribution: (f) => (f.json ? 0.15 : 0) },
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
