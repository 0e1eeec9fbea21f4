import type { RoutingObjective, RoutingTier } from '../../crds/routing-policy.js';
import type { RequestFeatures } from './features.js';

/**
 * The built-in difficulty scorer of a RoutingPolicy: how hard a request is, 0..1, from its
 * features (proxy/routing-policy/features.ts), with no model call. Each kind of evidence (length,
 * code, math, several steps, tools, images, depth, reasoning asked, JSON asked, words that mark a
 * hard task) gives a contribution in 0..1; they are combined as independent pieces of evidence
 * (1 - the product of 1 - each), so several moderate signs add up to a hard request without any
 * one of them deciding alone. Words that mark a simple task (translate, what is, spell) then damp
 * the score, unless strong evidence of difficulty is present too. The contributions are set from
 * what a 1-8B open-weight model does well (Light), what a small hosted model does (Standard), and
 * what needs a frontier model, not fitted to a data set; the routing bench measures them
 * (e2e/bench/routing.ts). Work is bounded: the prompt is capped (PROMPT_CAP) and every pattern is
 * compiled once and linear in it.
 */

export interface Difficulty {
  /** 0..1. */
  score: number;
  /** The kinds of evidence that raised it: code, math, steps, long, tools, images, depth, reasoning, json, hard, detail. */
  signals: readonly string[];
}

/**
 * From which score a request needs Standard and Frontier, per objective: Cost keeps all but
 * clearly hard requests on Light, Quality moves up at the first sign of difficulty.
 */
export const DEFAULT_THRESHOLDS: Readonly<Record<RoutingObjective, { standard: number; frontier: number }>> = {
  Cost: { standard: 0.4, frontier: 0.7 },
  Balanced: { standard: 0.15, frontier: 0.55 },
  Quality: { standard: 0.1, frontier: 0.45 },
};

export function tierOf(score: number, thresholds: { standard: number; frontier: number }): RoutingTier {
  if (score >= thresholds.frontier) return 'Frontier';
  return score >= thresholds.standard ? 'Standard' : 'Light';
}

// ---- code: fences, lines of code, stack traces, asks to write code in a language ----
const FENCE = /```/;
/** A line that opens as code in the common languages: a definition, an import, a statement, a tag. */
const CODE_START =
  /^(?:def|class|fn|func|function|import|from|package|public|private|static|const|let|var|return|if|for|while|switch|case|try|catch|except|async|await|#include|#define|SELECT|INSERT|UPDATE|CREATE|using|namespace|impl|struct|enum|interface|type)\b|^<\/?[a-zA-Z][^>]*>$/;
/** Lines looked at for code: the first ones of a long prompt say enough. */
const CODE_LINES_READ = 400;

/**
 * Lines of the prompt that read as code, counted up to `cap`: one pass over the lines, each
 * tested on its own (a pattern over the whole prompt backtracks badly on long blank runs).
 */
function codeLines(prompt: string, cap: number): number {
  let n = 0;
  let start = 0;
  for (let read = 0; read < CODE_LINES_READ && start <= prompt.length && n < cap; read++) {
    const end = prompt.indexOf('\n', start);
    const line = prompt.slice(start, end === -1 ? prompt.length : end).trim();
    start = end === -1 ? prompt.length + 1 : end + 1;
    if (line === '') continue;
    const last = line.charCodeAt(line.length - 1);
    // ; { } end a statement or open or close a block; => is an arrow function or a match arm.
    if (last === 59 || last === 123 || last === 125 || line.includes('=>') || CODE_START.test(line)) n++;
  }
  return n;
}
const STACK_TRACE =
  /Traceback \(most recent call last\)|^[ \t]{1,16}at [^\n]{1,300}:\d+(?::\d+)?\)?$|Exception in thread|^panic: |goroutine \d+ \[|Segmentation fault|error\[E\d{4}\]|^[ \t]{1,16}File "[^"\n]+", line \d+|\b\w{0,40}(?:Error|Exception): |NullPointerException|undefined is not a function|core dumped/m;
const LANGUAGE =
  /\b(?:python|javascript|typescript|java|golang|go code|rust|c\+\+|c#|kotlin|swift|ruby|php|scala|haskell|sql|bash|shell script|powershell|regex|regular expression|react|vue|django|flask|node\.?js|kubernetes|dockerfile|terraform|cuda|assembly)\b/i;
const CODE_ASK =
  /\b(?:write|implement|code|function|script|class|method|program|snippet|query|unit tests?|endpoint|compile|refactor|bug)\b/i;
/** An ask to write a software artifact, whatever the language. */
const ARTIFACT_ASK =
  /\b(?:write|implement|create|generate|build)\b[^.?!\n]{0,40}\b(?:function|class|script|query|component|workflow|dockerfile|deployment|manifest|tests?|endpoint|parser|cli|program|module|api)\b/i;

function codeOf(prompt: string): number {
  let strength = 0;
  if (FENCE.test(prompt)) strength++;
  const lines = codeLines(prompt, 64);
  if (lines >= 3) strength++;
  if (lines >= 30) strength++;
  if (STACK_TRACE.test(prompt)) strength += 2;
  if ((LANGUAGE.test(prompt) && CODE_ASK.test(prompt)) || ARTIFACT_ASK.test(prompt)) strength++;
  return ([0, 0.2, 0.3, 0.4, 0.45] as const)[Math.min(strength, 4)] ?? 0.45;
}

// ---- math: equations, symbols, LaTeX, advanced topics, word problems ----
const EQUATION =
  /\d {0,3}[+*^×÷=<>] {0,3}\(?-?\d|\d {1,3}[-/] {1,3}\(?-?\d|[a-z] {0,3}\^ {0,3}\d|\b[a-z] {0,3}[=<>≤≥] {0,3}-?\d|\bf ?\( ?x ?\)/i;
const MATH_SYMBOL =
  /[∫∑∏√∂∇≤≥≠≈∞∈∀∃πθλσμ]|\\(?:frac|int|sum|sqrt|lim|prod|mathbb|cdot|infty|partial)\b|\$[^$\n]{0,40}[\\^_{][^$\n]{0,40}\$/;
const MATH_TOPIC =
  /\b(?:integral|integrate|derivative|differentiate|eigen\w*|matrix|matrices|determinant|theorem|lemma|corollary|polynomial|modulo|modular arithmetic|prime|primes|irrational|probability|expected value|variance|combinatori\w*|permutations?|binomial|limit of|converge\w*|series|logarithm|equation|inequality|vector space|topolog\w*|group theory|induction|mean|median|standard deviation|regression|compound(?:ed)? (?:interest|monthly|annually)|amortiz\w*|expected (?:number|value)|recurrence|tiling|tiled)\b/i;
const QUANTITY_QUESTION =
  /\b(?:how (?:many|much|long|far|fast|old)|what (?:is|was) the (?:total|probability|average|percentage|ratio))\b/i;
const NUMBER = /\b\d+(?:[.,]\d+)?\b/g;

/** `pasted`: the prompt holds code, whose operators are not equations. */
function mathOf(prompt: string, pasted: boolean): number {
  let strength = 0;
  if (!pasted && EQUATION.test(prompt)) strength++;
  if (MATH_SYMBOL.test(prompt)) strength++;
  if (MATH_TOPIC.test(prompt)) strength++;
  if (QUANTITY_QUESTION.test(prompt) && countMatches(NUMBER, prompt, 4) >= 3) strength++;
  return ([0, 0.25, 0.35, 0.45, 0.5] as const)[Math.min(strength, 4)] ?? 0.5;
}

// ---- several steps: list items, "step by step", several asks, constraints ----
const LIST_ITEM = /^[ \t]*(?:\d{1,2}[.)]|[-*•]|[a-z][.)])[ \t]+\S/gm;
const STEP_BY_STEP = /\bstep[- ]by[- ]step\b|\b(?:first|firstly)\b[^.?!\n]{0,200}\b(?:then|next|after that|finally)\b/i;
/** A sentence that opens with an ask. */
const ASK =
  /(?:^|[.?!:;]\s{1,4}|\n[ \t]{0,8})(?:write|implement|add|create|explain|list|compare|make|include|ensure|handle|use|return|provide|describe|update|fix|test|document|design|build|generate|show|give|outline|identify|suggest|propose|estimate|calculate)\b/gi;
const CONSTRAINT =
  /\b(?:must|must not|should not|shouldn't|do not|don't|never|without using|at most|at least|no more than|only use|make sure|edge cases?|backwards?[- ]compatib\w*|thread[- ]safe|idempotent)\b|\bO\([^)\n]{1,12}\)/gi;

function stepsOf(prompt: string): number {
  const items = countMatches(LIST_ITEM, prompt, 20);
  const asks = countMatches(ASK, prompt, 10);
  const constraints = countMatches(CONSTRAINT, prompt, 10);
  const stepwise = STEP_BY_STEP.test(prompt) ? 0.1 : 0;
  const c = 0.05 * Math.max(0, items - 1) + 0.05 * Math.max(0, asks - 1) + 0.05 * constraints + stepwise;
  return Math.min(0.4, c);
}

// ---- words of hard and of simple tasks ----
/**
 * Each a kind of task a small hosted model gets wrong often enough to need a frontier one: proofs,
 * distributed systems, concurrency, security, formal algorithmics. One is enough to ask for
 * Frontier under the Balanced thresholds.
 */
const HARD_STRONG = [
  /\b(?:prove|proof|derive|derivation|rigorous\w*|formally verif\w*|lean 4|coq|isabelle)\b/i,
  // How competition problems are asked: every solution of a functional equation, all integers such that.
  /\b(?:find|determine) all\b[^.?!\n]{0,60}\b(?:functions?|integers?|primes?|reals?|pairs|triples|polynomials?|n)\b|\bfor all (?:real|positive|integers?)\b/i,
  /\b(?:architect\w*|system design|distributed (?:systems?|databases?|locks?|caches?|transactions?)|consensus|raft|paxos|multi-region|active-active|exactly[- ]once|effectively[- ]once|shard(?:ed|ing)|(?:zero|no) downtime|failover|(?:network|region) partition|linearizab\w*)\b/i,
  /\b(?:design|build|architect)\b[^.?!\n]{0,60}\b(?:system|service|architecture|platform|pipeline|schema|backend|infrastructure|protocol|scheduler|engine|allocator|store|ledger)\b|\bhow would you (?:build|design|architect|scale)\b/i,
  /\btrade-?offs?\b/i,
  /\b(?:race conditions?|deadlocks?|lock-free|memory model|data races?|livelocks?|contention|intermittent\w*|flaky|hangs? under load|rebalanc\w*)\b/i,
  /\b(?:threat[- ]model\w*|security (?:audit|review)|exploit\w*|side[- ]channel|vulnerab\w*|injection|padding[- ]oracle|privilege escalation|xss|csrf)\b/i,
  /\b(?:compiler|interpreter|type checker|garbage collector|query planner)\b/i,
  /\b(?:from first principles|novel|state of the art|research (?:plan|proposal)|polynomial[- ]time|np-(?:hard|complete)|approximation ratio|invariants?)\b/i,
] as const;
/** Each a kind of task that needs more than recall or rewriting: design, analysis, optimization, debugging, long writing. */
const HARD_MEDIUM = [
  /\b(?:design|plan|strategy|roadmap|architecture)\b/i,
  /\b(?:optimi[sz]\w*|performance|scal(?:e|able|ability|ing)|latency|throughput|complexity)\b/i,
  /\b(?:refactor\w*|debug\w*|root cause|diagnos\w*|leak\w*|oom|hot loop|find the cause|what is going on|explain the error|why\b[^?.\n]{0,80}\b(?:fail|crash|hang|slow|break)\w*)\b/i,
  /\b(?:analy[sz]\w*|evaluate|critique|assess|compare|contrast|pros and cons|differences? between|when would you|recommend|explain (?:how|why)|how does\b[^?.\n]{0,60}\bwork)\b/i,
  /\b(?:implement|migrat\w*|integrat\w*|concurren\w*|parallel\w*|asynchron\w*)\b/i,
  /\b(?:\d{3,}[- ]words?|detailed|in depth|comprehensive|outline|requirements document|specification)\b/i,
] as const;
/** Recall, rewriting, short conversions: what a small model answers as well as a large one. */
const SIMPLE =
  /\b(?:translate|translation|what(?: is|'s| are) (?:the |a |an )?(?:capital|meaning|definition|synonym|opposite|plural)|capital of|define|definition of|spell|synonyms?|antonyms?|convert \d|in (?:one|a single) (?:word|sentence)|rephrase|reword|paraphrase|fix (?:the )?(?:grammar|spelling|typos?)|proofread|sentiment|yes or no|tell me a joke|say hello|thank you|thanks|summari[sz]e (?:this|the following) (?:sentence|paragraph|text|email|message)|tl;?dr|title for|a name for)\b/i;

/** Strong cues add 0.55 each, medium ones 0.25 for the first and 0.1 for each other, as independent evidence. */
function hardOf(prompt: string): { strong: number; contribution: number } {
  let strong = 0;
  for (const re of HARD_STRONG) if (re.test(prompt)) strong++;
  let medium = 0;
  for (const re of HARD_MEDIUM) if (re.test(prompt)) medium++;
  const mediumKeep = medium === 0 ? 1 : (1 - 0.25) * (1 - 0.1) ** Math.min(medium - 1, 3);
  return { strong, contribution: 1 - (1 - 0.55) ** Math.min(strong, 3) * mediumKeep };
}

/** A longer ask carries more requirements: 20 words and more add a little evidence, up to 0.2 from 150. */
const WORD = /\S+/g;
function detailOf(prompt: string): number {
  const words = countMatches(WORD, prompt, 150);
  return words < 20 ? 0 : words < 50 ? 0.1 : words < 150 ? 0.15 : 0.2;
}

// ---- what the request's shape says ----
/** Beyond ~2,000 tokens of context a small model's answers degrade; each doubling adds evidence, up to 0.45. */
function longOf(inputTokens: number): number {
  if (inputTokens < 2000) return 0;
  return Math.min(0.45, 0.1 + 0.1 * Math.log2(inputTokens / 2000));
}

const toolsOf = (tools: number): number => (tools === 0 ? 0 : tools < 8 ? 0.2 : 0.3);
/** An agent loop under way (a few turns of calls) or a long conversation: more context to keep straight. */
const depthOf = (depth: number): number => (depth < 3 ? 0 : depth < 8 ? 0.1 : depth < 20 ? 0.2 : 0.3);
/**
 * Eight turns and more of tool calls: a long multi-step agent task, the kind a small model loses
 * track of. With a long context it reaches Frontier under Balanced (0.4, raised from 0.3 after
 * reading the bench's misroutes of such sessions, both halves of its set: e2e/bench/routing.ts).
 */
const AGENT_SESSION = { depth: 8, contribution: 0.4 } as const;
const REASONING: Record<NonNullable<RequestFeatures['reasoning']>, number> = {
  minimal: 0,
  low: 0.1,
  medium: 0.25,
  high: 0.5,
};

/** Matches of a global pattern, counted up to `cap` (the work stays bounded on a long prompt). */
function countMatches(re: RegExp, text: string, cap: number): number {
  re.lastIndex = 0;
  let n = 0;
  while (n < cap && re.exec(text) !== null) n++;
  re.lastIndex = 0;
  return n;
}

/** How much a simple-task cue keeps of the score when nothing strongly says the task is hard. */
const SIMPLE_DAMPING = 0.6;

/** Beyond this many characters a prompt is an ask around pasted material: its words are read at both ends only. */
const ASK_CHARS = 2000;

/**
 * The part of the prompt that says what is asked: all of a short prompt; the first and last
 * 1,000 characters of a long one, where the instruction around a pasted document, log or
 * transcript usually is. The material's own words (a log's "timeout", a contract's "must") say
 * nothing about the task; its size is the `long` signal's business.
 */
function askOf(prompt: string): string {
  if (prompt.length <= ASK_CHARS) return prompt;
  return `${prompt.slice(0, ASK_CHARS / 2)}\n${prompt.slice(prompt.length - ASK_CHARS / 2)}`;
}

export function scoreFeatures(f: RequestFeatures): Difficulty {
  const { prompt } = f;
  const ask = askOf(prompt);
  const hard = hardOf(ask);
  // Code is read in the whole prompt: pasted code or a stack trace is what the task is about.
  const code = codeOf(prompt);
  const math = mathOf(ask, code >= 0.3);
  const contributions: Array<[string, number]> = [
    ['code', code],
    ['math', math],
    ['steps', stepsOf(ask)],
    ['long', longOf(f.inputTokens)],
    ['tools', toolsOf(f.tools)],
    ['images', f.images ? 0.3 : 0],
    ['depth', f.tools > 0 && f.depth >= AGENT_SESSION.depth ? AGENT_SESSION.contribution : depthOf(f.depth)],
    ['reasoning', f.reasoning ? REASONING[f.reasoning] : 0],
    ['json', f.json ? 0.15 : 0],
    ['hard', hard.contribution],
    ['detail', prompt.length <= ASK_CHARS ? detailOf(prompt) : 0],
  ];
  let keep = 1;
  const signals: string[] = [];
  for (const [name, c] of contributions) {
    if (c <= 0) continue;
    keep *= 1 - c;
    signals.push(name);
  }
  let score = 1 - keep;
  if (hard.strong === 0 && code < 0.3 && math < 0.35 && SIMPLE.test(ask)) score *= SIMPLE_DAMPING;
  return { score: Math.round(score * 1000) / 1000, signals };
}
