import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import Database from 'better-sqlite3';
import { Agent, request } from 'undici';
import type { RoutingObjective, RoutingTier } from '../../crds/routing-policy.js';
import { featuresOf, scoredText } from '../../proxy/routing-policy/features.js';
import { builtInScorer, ClassifierScorer, shippedWeights } from '../../proxy/routing-policy/learned/text-scorer.js';
import { scoreRequest } from '../../proxy/routing-policy/scorer.js';
import { type HostedDouble, startHostedDouble } from '../doubles/hosted.js';
import { OLLAMA_MODEL, type OllamaServer, startOllama } from '../ollama/server.js';
import { type ProxyProcess, standaloneFiles, startProxyProcess } from '../support/proxy-process.js';
import { machineFacts, printVerdicts, type Verdict } from './gateways.js';
import { confusion, costMatchedConstant, heldOutScores, perSource, type Row, summary } from './routing-heldout.js';
import { type BenchDialect, codebase } from './routing-requests.js';
import { type Label, type LabelledRequest, labelledSet } from './routing-set.js';

/**
 * The routing policy's bench: does `model: "auto"` send each request to the cheapest model that
 * serves it well, on prompts its scorer was not trained on, and what does deciding cost?
 *
 * First, held out (e2e/bench/routing-heldout.ts): every source of the learned scorer's bank
 * (proxy/routing-policy/learned/sources.json: public benchmarks from registry packages, and the
 * hand-written set) scored by a classifier trained on every other source; per source, per
 * objective, with and without puzzle-like sources, against constant policies, as confusion
 * matrices; and what scoring adds in-process (features only, the learned scorer, a repeat).
 *
 * Then, unless `--offline`, through the gateway: the hand-written set (e2e/bench/routing-set.ts,
 * 199 requests in three dialects, with tools, images and long documents; in the shipped weights'
 * training, so not held out) replayed through the standalone gateway under three RoutingPolicies
 * over one pool: a real Ollama serving OLLAMA_MODEL (Light), and gpt-5-mini (Standard) and gpt-5
 * (Frontier) from an OpenAI ExternalProvider pointed at the hosted double. Each answer's
 * X-Routed-Model and X-Routing-Reason and each usage record make a row per policy; then the
 * routing overhead: the same request named to gpt-5-mini with routing off and sent as
 * `bench/auto`, alternately, one at a time: the difference of p50s, for a short question and for
 * a 200 KB conversation.
 *
 * Verdicts: the issue's held-out targets (under-routing, Frontier found, savings, constant
 * policies, the objectives' promises, scoring cost), and through the gateway savings and overhead.
 *
 * npx tsx e2e/bench/routing.ts [--offline] [--quick] [--json-out FILE]   (npm run bench -- --only routing)
 */

const { values } = parseArgs({
  options: { offline: { type: 'boolean' }, quick: { type: 'boolean' }, 'json-out': { type: 'string' } },
});
const quick = values.quick ?? false;
const KEY = 'sk-bench-routing';
const OPENAI_KEY = 'sk-openai-double-0001';
/** Small answers keep Ollama on two CPU cores fast; routing is decided before a token is generated. */
const MAX_TOKENS = 16;
const CONCURRENCY = 4;
const OVERHEAD_ROUNDS = quick ? 300 : 1500;

const POLICIES: ReadonlyArray<{ name: string; objective: RoutingObjective; model: string }> = [
  { name: 'default', objective: 'Balanced', model: 'auto' },
  { name: 'cost', objective: 'Cost', model: 'cost/auto' },
  { name: 'quality', objective: 'Quality', model: 'quality/auto' },
];
const POOL: ReadonlyArray<{ name: string; tier: RoutingTier }> = [
  { name: OLLAMA_MODEL, tier: 'Light' },
  { name: 'gpt-5-mini', tier: 'Standard' },
  { name: 'gpt-5', tier: 'Frontier' },
];
const RANK: Record<Label, number> = { light: 0, standard: 1, frontier: 2 };
const TIER_LABEL: Record<RoutingTier, Label> = { Light: 'light', Standard: 'standard', Frontier: 'frontier' };

/** What happened to one labelled request under one policy. */
interface Outcome {
  label: Label;
  served?: Label;
  costUsd: number;
  counterfactualUsd: number;
  escalations: number;
  reason?: string;
  status: number;
}

interface PolicyRow {
  policy: string;
  set: string;
  requests: number;
  'savings %': number;
  /** The mean of each request's own saving: the share of requests moved down, whatever their size. */
  'mean saving %': number;
  'light %': number;
  'standard %': number;
  'frontier %': number;
  'agree %': number;
  'under %': number;
  'over %': number;
  escalations: number;
  errors: number;
}

const pct = (n: number, of: number) => (of === 0 ? 0 : Math.round((1000 * n) / of) / 10);

function rowOf(policy: string, set: string, outcomes: Outcome[]): PolicyRow {
  const served = outcomes.filter((o) => o.served !== undefined);
  const count = (f: (o: Outcome) => boolean) => served.filter(f).length;
  const cost = outcomes.reduce((s, o) => s + o.costUsd, 0);
  const counterfactual = outcomes.reduce((s, o) => s + o.counterfactualUsd, 0);
  const rank = (o: Outcome) => RANK[o.served as Label] - RANK[o.label];
  return {
    policy,
    set,
    requests: outcomes.length,
    'savings %': counterfactual === 0 ? 0 : Math.round(1000 * (1 - cost / counterfactual)) / 10,
    'mean saving %': pct(
      outcomes.reduce((s, o) => s + (o.counterfactualUsd > 0 ? 1 - o.costUsd / o.counterfactualUsd : 0), 0),
      outcomes.length,
    ),
    'light %': pct(
      count((o) => o.served === 'light'),
      served.length,
    ),
    'standard %': pct(
      count((o) => o.served === 'standard'),
      served.length,
    ),
    'frontier %': pct(
      count((o) => o.served === 'frontier'),
      served.length,
    ),
    'agree %': pct(
      count((o) => rank(o) === 0),
      served.length,
    ),
    'under %': pct(
      count((o) => rank(o) < 0),
      served.length,
    ),
    'over %': pct(
      count((o) => rank(o) > 0),
      served.length,
    ),
    escalations: outcomes.reduce((s, o) => s + o.escalations, 0),
    errors: outcomes.length - served.length,
  };
}

/** p50 in ms of `f` over `rounds` calls after a warm-up. */
function p50Of(rounds: number, f: () => void): number {
  for (let i = 0; i < 50; i++) f();
  const times: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const started = performance.now();
    f();
    times.push(performance.now() - started);
  }
  return Math.round(1000 * (times.sort((a, b) => a - b)[Math.floor(times.length / 2)] ?? 0)) / 1000;
}

/**
 * What scoring adds to a routed request, in-process: features only; the learned scorer, embedding
 * included, on a 2,000-token request; the same prompt again. The gateway has no cache in front
 * of the built-in embedding: it costs less than a cache lookup's hashing would save.
 */
function scoringCost(): Array<{ case: string; 'p50 ms': number }> {
  const w = shippedWeights();
  const featuresOnly = new ClassifierScorer({ learned: w.learned, features: w.features });
  const learned = builtInScorer();
  const long = codebase(60, 7).slice(0, 8000);
  const body = { messages: [{ role: 'user', content: `Find why updates leave stale cache entries:\n${long}` }] };
  const distinct = Array.from({ length: 64 }, (_, i) => ({
    messages: [{ role: 'user', content: `Question ${i}: ${long.slice(i * 50)}` }],
  }));
  let next = 0;
  const score = (scorer: typeof learned, b: Record<string, unknown>) => {
    const f = featuresOf('openai-chat', b);
    return scoreRequest(f, scorer.score(scoredText(f)));
  };
  return [
    { case: 'features only, 2,000 tokens', 'p50 ms': p50Of(500, () => score(featuresOnly, body)) },
    {
      case: 'learned (embedding included), 2,000 tokens, distinct prompts',
      'p50 ms': p50Of(500, () => score(learned, distinct[next++ % distinct.length] as Record<string, unknown>)),
    },
    { case: 'learned, the same prompt again', 'p50 ms': p50Of(500, () => score(learned, body)) },
  ];
}

// ---------------------------------------------------------------- online

const dispatcher = new Agent({ connections: 16, keepAliveTimeout: 30_000 });

const PATHS: Record<BenchDialect, string> = {
  'openai-chat': '/openai/v1/chat/completions',
  'openai-responses': '/openai/v1/responses',
  'anthropic-messages': '/anthropic/v1/messages',
};

/** The request as the bench sends it: the policy's model, a small answer. */
function sendable(r: LabelledRequest, model: string): Record<string, unknown> {
  const body: Record<string, unknown> = { ...r.body, model };
  if (r.dialect === 'openai-responses') body.max_output_tokens = MAX_TOKENS;
  else if (r.dialect === 'anthropic-messages') body.max_tokens = MAX_TOKENS;
  else body.max_completion_tokens = MAX_TOKENS;
  return body;
}

interface Answer {
  status: number;
  routedModel?: string;
  reason?: string;
  text: string;
}

async function send(
  base: string,
  dialect: BenchDialect,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<Answer> {
  const res = await request(`${base}${PATHS[dialect]}`, {
    method: 'POST',
    dispatcher,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, ...headers },
    body: JSON.stringify(body),
  });
  const text = await res.body.text();
  const header = (name: string) => {
    const v = res.headers[name];
    return typeof v === 'string' ? v : undefined;
  };
  const routedModel = header('x-routed-model');
  const reason = header('x-routing-reason');
  return {
    status: res.statusCode,
    text,
    ...(routedModel !== undefined ? { routedModel } : {}),
    ...(reason !== undefined ? { reason } : {}),
  };
}

const provider = (name: string, spec: Record<string, unknown>) =>
  JSON.stringify({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'ExternalProvider',
    metadata: { name, namespace: 'platform-agent' },
    spec,
  });

const policyDoc = (
  name: string,
  objective: RoutingObjective,
  models: ReadonlyArray<{ name: string; tier: RoutingTier }>,
) =>
  JSON.stringify({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'RoutingPolicy',
    metadata: { name, namespace: 'platform-agent' },
    spec: {
      models,
      objective,
      // Every trigger (Length too: a cut at the caller's own max_tokens, as the bench's are, does not move).
      cascade: { maxEscalations: 1 },
    },
  });

/** The gateway's configuration: the pool's three models and the four policies. */
function documents(ollama: OllamaServer): string[] {
  return [
    JSON.stringify({
      apiVersion: 'ai.platform/v1beta1',
      kind: 'ModelDeployment',
      metadata: { name: 'light', namespace: 'platform-llms' },
      spec: { model: OLLAMA_MODEL, serviceName: 'light', endpoint: ollama.url },
    }),
    provider('openai', {
      provider: 'openai',
      displayName: 'OpenAI',
      auth: { method: 'APIKey', secretRef: { name: 'openai-key' } },
      models: ['gpt-5', 'gpt-5-mini'],
    }),
    ...POLICIES.map((p) => policyDoc(p.name, p.objective, POOL)),
    // The overhead's policy: double models only, so routed and named requests reach the same server.
    policyDoc(
      'bench',
      'Balanced',
      POOL.filter((m) => m.tier !== 'Light'),
    ),
  ].map((d) => `${d}\n`);
}

async function startStack(dir: string): Promise<{ ollama: OllamaServer; double: HostedDouble; gateway: ProxyProcess }> {
  const ollama = await startOllama({ parallel: CONCURRENCY, contextLength: 8192 });
  const double = await startHostedDouble({ models: { openai: ['gpt-5', 'gpt-5-mini'] } });
  mkdirSync(join(dir, 'secrets', 'openai-key'), { recursive: true });
  writeFileSync(join(dir, 'secrets', 'openai-key', 'apiKey'), OPENAI_KEY);
  const gateway = await startProxyProcess(
    [
      ...standaloneFiles(dir, documents(ollama), `${KEY}\n`),
      '--secrets-dir',
      join(dir, 'secrets'),
      '--usage-db',
      join(dir, 'usage.db'),
    ],
    { ...process.env, ...double.env },
  );
  return { ollama, double, gateway };
}

/** Every request under every policy, CONCURRENCY at a time; each tagged with its id and policy. */
async function replay(base: string, set: LabelledRequest[]): Promise<Map<string, Answer>> {
  const jobs = POLICIES.flatMap((p) => set.map((r) => ({ p, r })));
  const answers = new Map<string, Answer>();
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < jobs.length) {
        const { p, r } = jobs[next++] as (typeof jobs)[number];
        const tags = `bench:routing,req:${r.id},policy:${p.name}`;
        answers.set(`${p.name}/${r.id}`, await send(base, r.dialect, sendable(r, p.model), { 'x-tags': tags }));
      }
    }),
  );
  return answers;
}

interface RecordRow {
  tags: string;
  cost: number;
  counterfactual: number | null;
  escalations: number | null;
  status: number;
}

/** The usage records of the replay, by `<policy>/<request id>` from their tags. */
function recordsOf(db: string): Map<string, RecordRow> {
  const sqlite = new Database(db, { readonly: true });
  try {
    const rows = sqlite
      .prepare('SELECT tags, cost, counterfactual, escalations, status FROM requests')
      .all() as RecordRow[];
    const out = new Map<string, RecordRow>();
    for (const row of rows) {
      const req = /req:([\w-]+)/.exec(row.tags)?.[1];
      const policy = /policy:([\w-]+)/.exec(row.tags)?.[1];
      if (req && policy) out.set(`${policy}/${req}`, row);
    }
    return out;
  } finally {
    sqlite.close();
  }
}

/** Each policy's outcome of each labelled request, from its answer (headers) and its usage record. */
function onlineOutcomes(
  set: LabelledRequest[],
  answers: Map<string, Answer>,
  records: Map<string, RecordRow>,
): Map<string, Array<Outcome & { id: string; half: LabelledRequest['half'] }>> {
  const tierOfModel = new Map(POOL.map((m) => [m.name, TIER_LABEL[m.tier]]));
  const out = new Map<string, Array<Outcome & { id: string; half: LabelledRequest['half'] }>>();
  for (const p of POLICIES) {
    out.set(
      p.name,
      set.map((r) => {
        const a = answers.get(`${p.name}/${r.id}`);
        const rec = records.get(`${p.name}/${r.id}`);
        const served = a?.status === 200 && a.routedModel ? tierOfModel.get(a.routedModel) : undefined;
        return {
          id: r.id,
          half: r.half,
          label: r.tier,
          ...(served ? { served } : {}),
          costUsd: rec?.cost ?? 0,
          counterfactualUsd: rec?.counterfactual ?? 0,
          escalations: rec?.escalations ?? 0,
          ...(a?.reason ? { reason: a.reason } : {}),
          status: a?.status ?? 0,
        };
      }),
    );
  }
  return out;
}

/**
 * Each label's cost as a share of gpt-5's for the same tokens: Ollama is free, and gpt-5-mini is a
 * fifth of gpt-5 for input and output alike (the catalog's prices), so perfect routing's cost
 * follows from each record's counterfactual.
 */
const ORACLE_SHARE: Record<Label, number> = { light: 0, standard: 0.2, frontier: 1 };

function onlineRows(outcomes: ReturnType<typeof onlineOutcomes>): PolicyRow[] {
  const halves = (policy: string, list: Array<Outcome & { half: LabelledRequest['half'] }>) => [
    rowOf(policy, 'all', list),
    ...(['tuning', 'heldOut'] as const).map((half) =>
      rowOf(
        policy,
        half,
        list.filter((o) => o.half === half),
      ),
    ),
  ];
  const perfect = (outcomes.get('default') ?? []).map((o) => ({
    ...o,
    served: o.label,
    costUsd: ORACLE_SHARE[o.label] * o.counterfactualUsd,
    escalations: 0,
  }));
  return [...[...outcomes].flatMap(([policy, list]) => halves(policy, list)), ...halves('labels (oracle)', perfect)];
}

/** The default policy's requests served below their label, with why the gateway chose that model. */
function underRouted(outcomes: ReturnType<typeof onlineOutcomes>): Array<Record<string, string>> {
  return (outcomes.get('default') ?? [])
    .filter((o) => o.served !== undefined && RANK[o.served] < RANK[o.label])
    .map((o) => ({ id: o.id, label: o.label, served: o.served ?? '', reason: o.reason ?? '' }));
}

/**
 * The default policy's requests served above their label, dearest first: where savings go, since a
 * long request over-routed costs more than many short ones.
 */
function overRouted(outcomes: ReturnType<typeof onlineOutcomes>): Array<Record<string, string | number>> {
  return (outcomes.get('default') ?? [])
    .filter((o) => o.served !== undefined && RANK[o.served] > RANK[o.label])
    .sort((a, b) => b.costUsd - a.costUsd)
    .slice(0, 12)
    .map((o) => ({
      id: o.id,
      label: o.label,
      served: o.served ?? '',
      'cost µ$': Math.round(o.costUsd * 1e6),
      reason: o.reason ?? '',
    }));
}

/** How often each routing reason answered, per policy. */
function reasonsOf(answers: Map<string, Answer>): Record<string, Record<string, number>> {
  const out: Record<string, Record<string, number>> = {};
  for (const [key, a] of answers) {
    const policy = key.split('/')[0] as string;
    const reason = a.reason?.split(';')[0]?.trim() ?? `status ${a.status}`;
    const byPolicy = out[policy] ?? {};
    byPolicy[reason] = (byPolicy[reason] ?? 0) + 1;
    out[policy] = byPolicy;
  }
  return out;
}

const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;

interface Overhead {
  request: string;
  named: number;
  routed: number;
  added: number;
}

/**
 * Added latency of routing on one request body: named to gpt-5-mini with routing off, and sent to
 * the `bench` policy (a pool of double models, so both reach the same server), alternately, one at
 * a time, the first 100 of each a warm-up; the difference of the p50s.
 */
async function overheadOf(base: string, request: string, messages: unknown[], rounds: number): Promise<Overhead> {
  const named = { model: 'gpt-5-mini', messages, max_completion_tokens: MAX_TOKENS };
  const routed = { model: 'bench/auto', messages, max_completion_tokens: MAX_TOKENS };
  const off = { 'x-routing-enabled': 'false' };
  const times = { named: [] as number[], routed: [] as number[] };
  for (let i = 0; i < 100 + rounds; i++) {
    for (const which of ['named', 'routed'] as const) {
      const started = performance.now();
      const a = await send(base, 'openai-chat', which === 'named' ? named : routed, which === 'named' ? off : {});
      const ms = performance.now() - started;
      if (a.status !== 200) throw new Error(`${which}: ${a.status} ${a.text.slice(0, 300)}`);
      if (which === 'routed' && !a.routedModel?.startsWith('gpt-5'))
        throw new Error(`bench/auto served ${a.routedModel ?? 'no X-Routed-Model'}: not a double model`);
      if (i >= 100) times[which].push(ms);
    }
  }
  const round3 = (n: number) => Math.round(n * 1000) / 1000;
  return {
    request,
    named: round3(p50(times.named)),
    routed: round3(p50(times.routed)),
    added: round3(p50(times.routed) - p50(times.named)),
  };
}

/** A short question, and a 200 KB one (code pasted into a conversation): the features walk and the scorer's cap. */
async function overhead(base: string): Promise<Overhead[]> {
  const short = [{ role: 'user', content: 'Translate "good night" into French.' }];
  const large = [
    { role: 'system', content: 'You review code.' },
    { role: 'user', content: `Find why updates leave stale cache entries:\n${codebase(220, 11)}` },
  ];
  return [
    await overheadOf(base, 'short chat', short, OVERHEAD_ROUNDS),
    await overheadOf(
      base,
      `${Math.round(JSON.stringify(large).length / 1024)} KB chat`,
      large,
      Math.ceil(OVERHEAD_ROUNDS / 3),
    ),
  ];
}

async function online(set: LabelledRequest[]): Promise<{
  rows: PolicyRow[];
  under: Array<Record<string, string>>;
  over: Array<Record<string, string | number>>;
  reasons: Record<string, Record<string, number>>;
  overheadMs: Overhead[];
}> {
  const dir = mkdtempSync(join(tmpdir(), 'pao-bench-routing-'));
  const { ollama, double, gateway } = await startStack(dir);
  try {
    const started = performance.now();
    const answers = await replay(gateway.base, set);
    console.log(`replayed ${answers.size} requests in ${((performance.now() - started) / 1000).toFixed(1)} s`);
    // One failed answer of each status and model, to read why.
    const seen = new Set<string>();
    for (const [key, a] of answers) {
      const kind = `${a.status} ${a.routedModel ?? ''}`;
      if (a.status === 200 || seen.has(kind)) continue;
      seen.add(kind);
      console.log(`failed: ${key} ${kind}: ${a.text.slice(0, 300)}`);
    }
    const overheadMs = await overhead(gateway.base);
    // The records are flushed when the gateway stops.
    await gateway.stop('SIGTERM');
    const outcomes = onlineOutcomes(set, answers, recordsOf(join(dir, 'usage.db')));
    return {
      rows: onlineRows(outcomes),
      under: underRouted(outcomes),
      over: overRouted(outcomes),
      reasons: reasonsOf(answers),
      overheadMs,
    };
  } finally {
    await gateway.stop('SIGTERM');
    await double.close();
    await ollama.stop();
    await dispatcher.close();
  }
}

function heldOutVerdicts(rows: Row[], cost: Array<{ case: string; 'p50 ms': number }>): Verdict[] {
  const row = (set: string, policy: string) => rows.find((r) => r.set === set && r.policy === policy) as Row;
  const b = row('all', 'Balanced');
  const bn = row('no puzzles', 'Balanced');
  const constants = ['all Light', 'all Standard'].map((p) => row('all', p));
  const matched = costMatchedConstant(rows, 'all', b['savings %']);
  const [features, learned, repeat] = cost.map((c) => c['p50 ms']) as [number, number, number];
  return [
    {
      id: 'routing-heldout-under-no-puzzles',
      pass: bn['under %'] <= 10,
      detail: `Balanced, held-out sources without puzzles: ${bn['under %']} % under-routed (target <= 10 %)`,
    },
    {
      id: 'routing-heldout-under-all',
      pass: b['under %'] <= 20,
      detail: `Balanced, held-out sources with puzzles: ${b['under %']} % under-routed (target <= 20 %)`,
    },
    {
      id: 'routing-heldout-frontier-found',
      pass: bn['frontier→Frontier %'] >= 60,
      detail: `Balanced: ${bn['frontier→Frontier %']} % of non-puzzle Frontier prompts routed to Frontier (target >= 60 %)`,
    },
    {
      id: 'routing-heldout-savings',
      pass: b['savings %'] >= 40,
      detail: `Balanced saves ${b['savings %']} % against always-Frontier (target >= 40 %)`,
    },
    {
      // The issue asks for less under-routing "at equal or better savings" than every constant
      // policy. Only all Light saves 100 %, and all Standard (a fifth of gpt-5's price) saves more
      // than perfect routing does here, so no router can match either alone; the comparison at
      // equal savings is with the constant policies mixed at random to cost what Balanced costs.
      id: 'routing-beats-constant-policies',
      pass: constants.every((c) => b['under %'] < c['under %']) && b['under %'] < matched.under,
      detail: `Balanced under ${b['under %']} % at ${b['savings %']} % savings; ${constants.map((c) => `${c.policy} ${c['under %']} % at ${c['savings %']} %`).join(', ')}; the best random mix of constant policies saving ${b['savings %']} % (${matched.mix}) under-routes ${matched.under} %`,
    },
    {
      id: 'routing-objectives-keep-their-promise',
      pass: row('all', 'Cost')['savings %'] > b['savings %'] && row('all', 'Quality')['under %'] < b['under %'],
      detail: `Cost saves ${row('all', 'Cost')['savings %']} % (Balanced ${b['savings %']} %); Quality under-routes ${row('all', 'Quality')['under %']} % (Balanced ${b['under %']} %)`,
    },
    {
      id: 'routing-scoring-features-p50',
      pass: features <= 1,
      detail: `features only: ${features} ms at p50 (target <= 1 ms)`,
    },
    {
      id: 'routing-scoring-learned-p50',
      pass: learned <= 10,
      detail: `learned, 2,000 tokens: ${learned} ms at p50 (target <= 10 ms)`,
    },
    {
      id: 'routing-scoring-repeat-p50',
      pass: repeat < 1,
      detail: `a repeated prompt: ${repeat} ms at p50 (target < 1 ms)`,
    },
  ];
}

function onlineVerdicts(rows: PolicyRow[], overheadMs: Overhead[]): Verdict[] {
  const d = rows.find((r) => r.policy === 'default' && r.set === 'all');
  const oracle = rows.find((r) => r.policy === 'labels (oracle)' && r.set === 'all');
  return [
    {
      id: 'routing-gateway-default-savings',
      pass: d ? d['savings %'] >= 40 : false,
      detail: `through the gateway, the hand-written set (in the shipped weights' training): default policy saves ${d?.['savings %']} % against gpt-5, perfect routing ${oracle?.['savings %']} % (target >= 40 %)`,
    },
    {
      id: 'routing-overhead-p50',
      pass: overheadMs.every((o) => o.added <= 1),
      detail: `routing added ${overheadMs.map((o) => `${o.added} ms (${o.request})`).join(', ')} at p50 through the gateway (target <= 1 ms)`,
    },
  ];
}

async function main(): Promise<void> {
  const started = performance.now();
  const scored = await heldOutScores();
  console.log(`held-out scores of ${scored.length} bank prompts in ${Math.round(performance.now() - started)} ms`);
  console.log('leave-one-source-out, per source, Balanced:');
  console.table(perSource(scored));
  const rows = summary(scored);
  console.log('leave-one-source-out, per objective and constant policy:');
  console.table(rows);
  console.log('confusion (rows: label; columns: routed to):');
  console.table([...confusion(scored, 'Cost'), ...confusion(scored, 'Balanced'), ...confusion(scored, 'Quality')]);
  const cost = scoringCost();
  console.table(cost);
  let verdicts = heldOutVerdicts(rows, cost);
  let result: Record<string, unknown> = { heldOut: rows, perSource: perSource(scored), scoringCost: cost };
  if (!values.offline) {
    const all = labelledSet();
    // Two of every eight: both halves, every dialect and kind.
    const set = quick ? all.filter((_, i) => i % 8 < 2) : all;
    const o = await online(set);
    console.log('through the gateway (the hand-written set):');
    console.table(o.rows);
    console.log('under-routed by the gateway, default policy:');
    console.table(o.under);
    console.log('over-routed by the gateway, default policy, dearest first:');
    console.table(o.over);
    console.log('routing reasons:', JSON.stringify(o.reasons));
    console.table(o.overheadMs);
    result = { ...result, online: o.rows, onlineUnder: o.under, reasons: o.reasons, overheadMs: o.overheadMs };
    verdicts = [...verdicts, ...onlineVerdicts(o.rows, o.overheadMs)];
  }
  printVerdicts(verdicts);
  if (values['json-out'])
    writeFileSync(values['json-out'], JSON.stringify({ machine: machineFacts(), ...result, verdicts }, null, 2));
  if (values.offline) await dispatcher.close();
}

await main();
