import { type AccountDeps, account } from './account.js';
import { type AdmitDeps, admit, admitAtDoor } from './admit.js';
import { type BodyDeps, readBody, readDoorBody } from './body.js';
import { type CacheDeps, keepInCache, lookInCache } from './cache.js';
import { type CallDeps, call } from './call.js';
import { errorAnswer } from './endpoints/error-answer.js';
import { internalError, ProxyError } from './endpoints/errors.js';
import type { Admitted, Answer, Answered, DoorIncoming, DoorPass, Failed, Incoming, Routed } from './exchange.js';
import { guard, guardAnswer } from './guard.js';
import type { GuardDeps } from './guardrails/guard-deps.js';
import { parse } from './parse.js';
import { type RouteDeps, route } from './route.js';
import type { StoredResponses } from './stored-responses/stored-responses.js';
import type { UsageSink } from './usage/record.js';

/**
 * The request path of every endpoint, in every dialect (proxy/endpoints/endpoints.ts), as stages
 * over plain values, each in a file of its own and run in this order:
 *
 *   admit    proxy/admit.ts   the key, draining, the key's rates, a JSON body, memory for it
 *   body     proxy/body.ts    the body read within its limits, its JSON
 *   parse    proxy/parse.ts   the endpoint's request, its tags
 *   guard    proxy/guard.ts   the guardrails that select it: findings, redaction, a block
 *   route    proxy/route.ts   the model's route for this key, budgets, what to try and how
 *   cache    proxy/cache.ts   a hit answers here; a miss's answer is kept after the call
 *   call     proxy/call.ts    the route and its fallbacks, retries, translators, the upstream;
 *                              then the answer's guardrails (proxy/guard.ts guardAnswer)
 *   account  proxy/account.ts one usage record, metrics, span, budgets; the answer
 *
 * A stage that refuses returns a Failed, which goes straight to account. The front door
 * (proxy/front-door.ts) reads every request into an Incoming and writes every Answer.
 *
 * MCP's door (/mcp) passes the same admit and body stages (doorAdmission), so what they hold (the
 * key, draining, the key's rates, memory for the body) holds for tools too; proxy/mcp/ then
 * parses, routes, calls and accounts its JSON-RPC messages.
 */

export type PipelineDeps = AdmitDeps &
  BodyDeps &
  GuardDeps &
  CacheDeps &
  RouteDeps &
  CallDeps &
  AccountDeps & {
    usage: UsageSink;
    /** Stateful Responses: the conversation before the route, the answer kept after the call. */
    storedResponses?: StoredResponses;
    /** A failure of the gateway itself (never a caller's or an upstream's), with its request id. */
    onError?: (err: unknown, requestId: string) => void;
  };

export type Pipeline = (incoming: Incoming) => Promise<Answer>;

export function createPipeline(deps: PipelineDeps): Pipeline {
  // Requests being handled (not streams being relayed): the usage spool groups the writes of
  // concurrent ones into one per event-loop turn, and writes a lone one at once.
  let handling = 0;
  return async (incoming) => {
    handling += 1;
    let answer: Answer;
    try {
      answer = await handle(deps, incoming);
    } finally {
      handling -= 1;
    }
    const durable = deps.usage.durable?.(handling === 0);
    // A whole answer's record waits to learn whether the answer reached its caller (a stream's
    // final record is made after its last byte already).
    const { usage } = deps;
    const delivered =
      answer.kind === 'json' && usage.delivered
        ? (ok: boolean) => usage.delivered?.(incoming.requestId, ok)
        : undefined;
    return durable || delivered
      ? { ...answer, ...(durable ? { durable } : {}), ...(delivered ? { delivered } : {}) }
      : answer;
  };
}

async function handle(deps: PipelineDeps, incoming: Incoming): Promise<Answer> {
  const admitted = await admit(deps, incoming);
  // Unauthenticated requests are answered without a usage record: nobody to bill.
  if (admitted instanceof ProxyError) return errorAnswer(admitted, incoming.requestId, incoming.endpoint.dialect);
  if ('failed' in admitted) return account(deps, admitted);
  try {
    const outcome = await flow(deps, admitted);
    if ('failed' in outcome && outcome.cause !== undefined) deps.onError?.(outcome.cause, incoming.requestId);
    return account(deps, outcome);
  } finally {
    // By now the body went to the upstream (or was refused): its memory is no longer held.
    admitted.reservation.release();
  }
}

/**
 * body -> parse -> [history] -> guard -> route -> [check] -> cache -> call -> [keep], stopping at the
 * first stage that refuses (the call's answer through its guardrails, then into the cache, before
 * it is kept); a cache hit skips the call
 * that refuses. The bracketed stages are stored Responses' (proxy/stored-responses/), for the
 * Responses requests the gateway keeps: the conversation a previous_response_id continues put
 * before the input; the route checked for what a kept response needs; the answer given the
 * gateway's id and kept. A background request is answered queued, its call finishing later.
 */
async function flow(deps: PipelineDeps, admitted: Admitted): Promise<Answered | Failed> {
  const stored = deps.storedResponses;
  try {
    const read = await readBody(deps, admitted);
    if ('failed' in read) return read;
    const parsedOnly = parse(read);
    if ('failed' in parsedOnly) return parsedOnly;
    const prepared = (await stored?.prepare(parsedOnly)) ?? parsedOnly;
    if ('failed' in prepared) return prepared;
    // No guardrail in force: no stage to wait for (the request path's common case).
    const parsed = deps.guardrails?.size ? await guard(deps, prepared) : prepared;
    if ('failed' in parsed) return parsed;
    if (parsed.request !== prepared.request) stored?.carry(prepared.request, parsed.request);
    const routed = await route(deps, parsed);
    if ('failed' in routed) return routed;
    const answer = async (r: Routed) => {
      const called = await call(deps, r);
      return 'failed' in called || !called.guard?.answer.length ? called : guardAnswer(deps, called);
    };
    const refused = stored?.check(deps.backends, routed);
    if (refused) return refused;
    // A background request's call settles its kept row itself, when it finishes.
    if (stored?.inBackground(routed)) return await stored.background(routed, answer);
    const found = lookInCache(deps, routed);
    const looked = found instanceof Promise ? await found : found;
    if ('failed' in looked) return looked;
    // A hit passes the answer's guardrails as any answer does: they select by key and tags, which need not be the keeper's.
    const answered = isAnswered(looked) ? await guardAnswer(deps, looked) : keepInCache(deps, await answer(looked));
    return stored ? await stored.keep(routed, answered) : answered;
  } catch (cause) {
    return { failed: internalError(admitted.incoming.requestId), at: admitted, cause };
  }
}

/** A cache hit's answer, rather than the request going on to its call. */
const isAnswered = (x: Routed | Answered): x is Answered => 'result' in x;

/**
 * The admit and body stages for a door that is not a model endpoint (MCP's): the door's pass, or
 * the refusal for the door to answer in its own protocol. Its requests start no request span (a
 * tool call has its own span) and are recorded by the door (a usage record per tool call).
 */
export function doorAdmission(deps: AdmitDeps & BodyDeps): (door: DoorIncoming) => Promise<DoorPass | ProxyError> {
  return async (door) => {
    const admitted = await admitAtDoor(deps, door);
    if (admitted instanceof ProxyError) return admitted;
    const release = () => admitted.reservation.release();
    if (admitted.refused) {
      release();
      return admitted.refused;
    }
    const pass = { requestId: door.requestId, caller: admitted.caller, headers: admitted.headers, bytes: 0, release };
    if (door.bodyless) return pass;
    const read = await readDoorBody(deps, door, admitted.reservation).catch((err: unknown) => {
      release();
      throw err;
    });
    if (read instanceof ProxyError) {
      release();
      return read;
    }
    return { ...pass, ...read };
  };
}
