import { conformAnswer } from '../conformance/conformance.js';
import { invalidRequest } from '../endpoints/errors.js';
import type { Answered, Failed, Routed } from '../exchange.js';
import type { StreamOutcome } from '../upstreams/upstream.js';
import { oneChunk, stamped } from './answer.js';
import { rowBytes } from './rows.js';
import { type StoredResponses, storeUnavailable, type Turn } from './stored-responses.js';

/**
 * `background: true`: the caller is answered at once with the response `queued`, and the call
 * runs detached from its connection, under the same key, tags, limits and route. Its one usage
 * record is the request's: the first answer goes to the accounting stage as a "stream" of one
 * chunk (the queued Response, as JSON) whose end is the detached call's, so the record is begun
 * at once and settled with the tokens the call used (a cancelled one as the caller's 499). The
 * caller polls GET /openai/v1/responses/{id} and may cancel it (POST .../cancel): the replica
 * running it sees the stored status turn `cancelled` within a second and aborts the call.
 */

type Json = Record<string, unknown>;

const CANCEL_POLL_MS = 1_000;

/** The queued Response: what the caller sees first. */
function queuedResponse(routed: Routed, turn: Turn): Json {
  const { forward } = routed.request;
  const queued = stamped(
    {
      object: 'response',
      created_at: Math.floor(Date.now() / 1000),
      status: 'queued',
      error: null,
      incomplete_details: null,
      instructions: forward.instructions ?? null,
      max_output_tokens: forward.max_output_tokens ?? null,
      model: routed.request.model,
      output: [],
      tools: forward.tools ?? [],
      metadata: forward.metadata ?? {},
      usage: null,
    },
    turn.stamp,
  );
  return conformAnswer('openai-responses', queued) as Json;
}

export async function runInBackground(
  stored: StoredResponses,
  routed: Routed,
  turn: Turn,
  next: (routed: Routed) => Promise<Answered | Failed>,
): Promise<Answered | Failed> {
  const queued = queuedResponse(routed, turn);
  const { id } = turn.stamp;
  const row = stored.rowOf(turn, queued);
  // Its input alone past the bound: it could never be kept to be polled, so it is not started.
  if (rowBytes(row) > stored.maxBytes)
    return {
      failed: invalidRequest(
        `a background response is kept to be polled, and this one's input (${rowBytes(row)} bytes) passes the ${stored.maxBytes} bytes a stored response may hold: send it with background: false`,
        'input',
      ),
      at: routed,
    };
  try {
    await stored.rows.put(row);
  } catch (err) {
    stored.warnFailed('background response not stored', id, err);
    return {
      failed: storeUnavailable('the store of responses is not answering: try again, or send background: false'),
      at: routed,
    };
  }
  const controller = new AbortController();
  stored.running.set(id, controller);
  const detached: Routed = { ...routed, incoming: { ...routed.incoming, signal: controller.signal } };
  const outcome = detachedRun(stored, detached, turn, queued, controller, next);
  return {
    ...routed,
    // The first answer is JSON, though it is accounted as a stream (its usage comes at the end).
    headers: { ...routed.headers, 'content-type': 'application/json', 'cache-control': 'no-store' },
    served: routed.route,
    result: { kind: 'stream', body: oneChunk(JSON.stringify(queued)), outcome },
  };
}

async function detachedRun(
  stored: StoredResponses,
  routed: Routed,
  turn: Turn,
  queued: Json,
  controller: AbortController,
  next: (routed: Routed) => Promise<Answered | Failed>,
): Promise<StreamOutcome> {
  const { id } = turn.stamp;
  const settle = (status: string, response: Json | string) =>
    stored.rows
      .settle(id, status, typeof response === 'string' ? response : JSON.stringify(response))
      .catch((err: unknown) => stored.warnFailed('background response not settled', id, err));
  const poll = setInterval(() => {
    stored.rows.get(id).then(
      (row) => {
        if (row?.status === 'cancelled' || !row) controller.abort(new Error('cancelled'));
      },
      () => {},
    );
  }, CANCEL_POLL_MS);
  poll.unref();
  try {
    await settle('in_progress', { ...queued, status: 'in_progress' });
    const done = await next(routed);
    if (controller.signal.aborted) return { clientAborted: true };
    if ('failed' in done) {
      const { code, message } = done.failed;
      await settle('failed', { ...queued, status: 'failed', error: { code, message } });
      return { error: done.failed };
    }
    const { result } = done;
    if (result.kind === 'stream') {
      // Never: the detached call asks for no stream. Its body is released all the same.
      result.body instanceof ReadableStream ? await result.body.cancel() : result.body.cancel();
      await settle('failed', {
        ...queued,
        status: 'failed',
        error: { code: 'server_error', message: 'unexpected stream' },
      });
      return await result.outcome;
    }
    const response = conformAnswer('openai-responses', stamped(result.body, turn.stamp)) as Json;
    const row = stored.rowOf(turn, response);
    if (rowBytes(row) > stored.maxBytes) {
      const error = {
        code: 'response_too_large',
        message: `the response is larger than the ${stored.maxBytes} bytes this gateway stores`,
      };
      await settle('failed', { ...queued, status: 'failed', error });
    } else await settle(row.status, row.response);
    return result.usage ? { usage: result.usage } : {};
  } catch (err) {
    // The gateway's own failure: the poller learns it ended (the request's record says 500).
    await settle('failed', {
      ...queued,
      status: 'failed',
      error: { code: 'server_error', message: 'the gateway failed' },
    });
    throw err;
  } finally {
    clearInterval(poll);
    stored.running.delete(id);
  }
}
