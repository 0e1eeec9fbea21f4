import { isRecord } from '../../crds/is-record.js';
import { MAX_CHOICES } from '../endpoints/chat-request.js';
import type { CallerDialect } from '../endpoints/dialects.js';
import { invalidRequest, ProxyError } from '../endpoints/errors.js';
import type { Attempt } from '../exchange.js';
import { type Backends, backendOf } from './backend.js';
import { mergedStream } from './fan-out-stream.js';
import { MANY_ANSWERS, type ManyAnswers } from './openai-compatible-dialects.js';
import type { UpstreamCall, UpstreamResult, Usage } from './upstream.js';

/**
 * One request for several answers, on a server that gives one per call: chat's and completions'
 * `n` choices, and completions' list of prompts, where the route's server does not take them
 * natively (MANY_ANSWERS, as data). The request becomes one call per answer (or per prompt, where
 * only `n` is native), at most FAN_OUT_PARALLEL at once, each through the route's plan, retries
 * and translators; their answers become one, as the server that takes them would have given it:
 * choices indexed prompt_index * n + i (OpenAI's order), the first answer's id and created, usage
 * summed as the calls were billed (the prompt counted once per call). Any call failing fails the
 * request (the others are cancelled). Streams are merged into one (fan-out-stream.ts).
 */

/** The calls made at once for one request; the rest wait for one of them to end. */
const FAN_OUT_PARALLEL = 8;
/** Most calls one request becomes (prompts x n where neither is native): OpenAI's maximum of choices. */
const MAX_FAN_OUT = MAX_CHOICES;

/** One call of a request's fan-out: its body, and where each choice it answers goes among the request's. */
export interface Part {
  body: Record<string, unknown>;
  /** The request's choice index of the call's choice `i`. */
  index(i: number): number;
}

type Call = Omit<UpstreamCall, 'route' | 'dialect'>;

const NONE: ManyAnswers = { choices: false, promptLists: false, tokenPrompts: false };

/** What the attempt's server takes natively of the caller's dialect; nothing through a translator. */
export function manyAnswersOf(backends: Backends, attempt: Attempt): { dialect: CallerDialect; takes: ManyAnswers } {
  const { plan, route } = attempt;
  if (plan instanceof ProxyError) return { dialect: 'openai-chat', takes: NONE };
  if (plan.translator) return { dialect: plan.translator.from, takes: NONE };
  const system = backendOf(backends, route).who(route).system ?? '';
  const dialect = plan.dialect as CallerDialect;
  return { dialect, takes: MANY_ANSWERS[system]?.[dialect] ?? NONE };
}

const isTokens = (p: unknown): boolean => Array.isArray(p) && p.every((t) => typeof t === 'number');

/**
 * The calls a request becomes on a server that takes `takes`; undefined: one call, the body as it
 * is; a 400 for token prompts a server cannot take, or more calls than MAX_FAN_OUT.
 */
export function partsOf(
  body: Record<string, unknown>,
  dialect: CallerDialect,
  takes: ManyAnswers,
): Part[] | ProxyError | undefined {
  if (dialect !== 'openai-chat' && dialect !== 'openai-completions') return undefined;
  const n = typeof body.n === 'number' ? body.n : 1;
  const prompt = dialect === 'openai-completions' ? body.prompt : undefined;
  const list = Array.isArray(prompt) && !isTokens(prompt) ? (prompt as unknown[]) : undefined;
  const tokens = isTokens(prompt) || (list?.some(isTokens) ?? false);
  if (tokens && !takes.tokenPrompts) {
    return invalidRequest(
      "prompt is token ids, and this model's server takes text prompts only: send the prompt as text",
      'prompt',
      'unsupported_prompt',
    );
  }
  const listNative = list === undefined || takes.promptLists;
  const choicesNative = n === 1 || takes.choices;
  if (listNative && choicesNative) return undefined;
  const { n: _n, ...one } = body;
  const parts: Part[] = [];
  if (listNative) {
    // The whole list in each call, one choice per prompt: call k gives each prompt's choice k.
    for (let k = 0; k < n; k++) parts.push({ body: one, index: (i) => i * n + k });
  } else {
    for (const [p, each] of (list ?? []).entries()) {
      if (choicesNative) parts.push({ body: { ...body, prompt: each }, index: (i) => p * n + i });
      else for (let k = 0; k < n; k++) parts.push({ body: { ...one, prompt: each }, index: (i) => p * n + k + i });
    }
  }
  if (parts.length > MAX_FAN_OUT) {
    return invalidRequest(
      `this model's server answers one ${choicesNative ? 'prompt' : 'choice'} per call, and the gateway makes at most ${MAX_FAN_OUT} calls for one request: ${list ? `${list.length} prompts` : ''}${list && n > 1 ? ' x ' : ''}${n > 1 ? `n ${n}` : ''} is ${parts.length}`,
      n > 1 && !choicesNative ? 'n' : 'prompt',
      'too_many_answers',
    );
  }
  return parts;
}

/**
 * The call, made as one or several (`send` makes one: the route's plan, retries, translators):
 * the hook proxy/call.ts calls for every route it tries.
 */
export function fanOut(
  backends: Backends,
  attempt: Attempt,
  call: Call,
  send: (call: Call) => Promise<UpstreamResult>,
): Promise<UpstreamResult> {
  const { dialect, takes } = manyAnswersOf(backends, attempt);
  const parts = partsOf(call.body, dialect, takes);
  if (parts === undefined) return send(call);
  if (parts instanceof ProxyError) return Promise.reject(parts);
  return call.stream ? mergedStream(parts, call, send, FAN_OUT_PARALLEL) : whole(parts, call, send);
}

/** Every part's whole answer (at most FAN_OUT_PARALLEL at once), as one. */
async function whole(
  parts: Part[],
  call: Call,
  send: (call: Call) => Promise<UpstreamResult>,
): Promise<UpstreamResult> {
  const cancel = new AbortController();
  const signal = AbortSignal.any([call.signal, cancel.signal]);
  const answers = new Array<UpstreamResult>(parts.length);
  let next = 0;
  const worker = async () => {
    while (next < parts.length && !signal.aborted) {
      const at = next++;
      const part = parts[at] as Part;
      try {
        answers[at] = await send({ ...call, body: part.body, signal });
      } catch (err) {
        cancel.abort();
        throw err;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(FAN_OUT_PARALLEL, parts.length) }, worker));
  // The caller left between parts: the workers stopped with answers missing, and nobody waits for them.
  if (call.signal.aborted)
    throw new ProxyError(503, 'api_error', 'client_closed', 'the client went away before every answer was made', null, {
      'Retry-After': '1',
    });
  return mergeWhole(parts, answers);
}

type Json = Record<string, unknown>;

/** Whole answers of the parts as one: their choices re-indexed in order, the first's id and created, usage summed. */
export function mergeWhole(parts: readonly Part[], answers: readonly UpstreamResult[]): UpstreamResult {
  const choices: Json[] = [];
  const bodyUsages: unknown[] = [];
  const usages: Usage[] = [];
  for (const [i, answer] of answers.entries()) {
    if (answer.kind !== 'json' || !isRecord(answer.body)) throw new Error('a fanned-out call answered a stream');
    const part = parts[i] as Part;
    for (const c of Array.isArray(answer.body.choices) ? answer.body.choices : []) {
      if (isRecord(c)) choices.push({ ...c, index: part.index(typeof c.index === 'number' ? c.index : 0) });
    }
    if (answer.body.usage !== undefined) bodyUsages.push(answer.body.usage);
    if (answer.usage) usages.push(answer.usage);
  }
  choices.sort((a, b) => (a.index as number) - (b.index as number));
  const first = answers[0] as Extract<UpstreamResult, { kind: 'json' }>;
  const usage = sumUsage(usages);
  const body: Json = { ...(first.body as Json), choices };
  if (bodyUsages.length) body.usage = sumJson(bodyUsages);
  return {
    kind: 'json',
    status: first.status,
    body,
    ...(usage ? { usage } : {}),
    ...(first.headers ? { headers: first.headers } : {}),
  };
}

/** The calls' usage as the request's: every count summed; counted where any was. */
export function sumUsage(usages: readonly (Usage | undefined)[]): Usage | undefined {
  const known = usages.filter((u): u is Usage => u !== undefined);
  if (known.length === 0) return undefined;
  const total = (pick: (u: Usage) => number | undefined) => known.reduce((n, u) => n + (pick(u) ?? 0), 0);
  const optional = (pick: (u: Usage) => number | undefined) => {
    const n = total(pick);
    return n > 0 ? n : undefined;
  };
  const cached = optional((u) => u.cachedTokens);
  const written = optional((u) => u.cacheWriteTokens);
  const written1h = optional((u) => u.cacheWrite1hTokens);
  return {
    promptTokens: total((u) => u.promptTokens),
    completionTokens: total((u) => u.completionTokens),
    ...(cached ? { cachedTokens: cached } : {}),
    ...(written ? { cacheWriteTokens: written } : {}),
    ...(written1h ? { cacheWrite1hTokens: written1h } : {}),
    ...(known.some((u) => u.counted) ? { counted: true as const } : {}),
  };
}

/** Usage objects of a dialect's answers summed field by field (numbers added, objects recursed, the rest the first's). */
export function sumJson(values: readonly unknown[]): unknown {
  const [first, ...rest] = values;
  if (typeof first === 'number') return rest.reduce<number>((n, v) => n + (typeof v === 'number' ? v : 0), first);
  if (!isRecord(first)) return first;
  const out: Json = {};
  const keys = new Set(values.flatMap((v) => (isRecord(v) ? Object.keys(v) : [])));
  for (const key of keys) {
    const present = values
      .filter(isRecord)
      .map((v) => v[key])
      .filter((v) => v !== undefined && v !== null);
    out[key] = present.length ? sumJson(present) : null;
  }
  return out;
}
