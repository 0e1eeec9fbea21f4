import { BODY_MEMORY_FACTOR, type NeverFits } from '../access/memory-budget.js';
import { conformAnswer } from '../conformance/conformance.js';
import type { ParsedRequest } from '../endpoints/chat-request.js';
import { ProxyError } from '../endpoints/errors.js';
import type { Answered, Failed, Parsed, Routed } from '../exchange.js';
import { type Backends, backendOf } from '../upstreams/backend.js';
import { type Stamp, stampEvents, stamped, tapStream } from './answer.js';
import { runInBackground } from './background.js';
import { HISTORY_BOUNDS, type HistoryBounds, historyOf } from './history.js';
import { inputItems, newId } from './items.js';
import { mayRead, ownerOf } from './owner.js';
import { resolveReferences } from './references.js';
import { itemIds, type NewRow, type ResponseRows, rowBytes } from './rows.js';

/**
 * Stateful Responses (POST /openai/v1/responses with `store`, `previous_response_id`,
 * `background`), whatever the upstream: the gateway keeps each response in the usage store's
 * database, owned by the caller's team, and expands `previous_response_id` into the input it
 * sends (so Bedrock, Anthropic and chat-only servers chain as OpenAI does). Two pipeline hooks:
 * `prepare` after parsing (the conversation, before routing sees the request) and `call` around
 * the call (the answer stamped with the gateway's id and stored; a background one run detached).
 * Nothing stored is ever logged: logs name ids and sizes only.
 */

export interface StoredResponsesSettings {
  /** Days a stored response is kept (OpenAI keeps 30). */
  retentionDays?: number;
  /** Largest response (its Response object and input items, in bytes) stored; a larger one is served, not stored. */
  maxResponseBytes?: number;
  history?: HistoryBounds;
}

const DEFAULT_RETENTION_DAYS = 30;
const DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024;

/** Where a json answer says it was not stored (a stream's cannot: its headers leave first). */
const STORED_HEADER = 'x-gateway-response-stored';

/** The model providers that resolve `prompt` templates and run hosted tools: OpenAI's, served natively. */
const OPENAI_NATIVE_SYSTEMS = new Set(['openai', 'azure.ai.openai']);

type Json = Record<string, unknown>;

/** What `prepare` decided for a request, for `call`. */
export interface Turn {
  stamp: Stamp;
  owner: string;
  /** The request's own input items, with their ids. */
  input: Json[];
}

export interface StoredResponsesLog {
  warn(message: string, fields?: Record<string, unknown>): void;
  info?(message: string, fields?: Record<string, unknown>): void;
}

export class StoredResponses {
  private readonly turns = new WeakMap<ParsedRequest, Turn>();
  /** Background responses running in this process, by id. */
  readonly running = new Map<string, AbortController>();
  readonly retentionMs: number;
  readonly maxBytes: number;

  constructor(
    readonly rows: ResponseRows,
    private readonly settings: StoredResponsesSettings = {},
    private readonly log?: StoredResponsesLog,
  ) {
    this.retentionMs = (settings.retentionDays ?? DEFAULT_RETENTION_DAYS) * 86_400_000;
    this.maxBytes = settings.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
  }

  /**
   * A Responses request with the conversation it continues: the items of `previous_response_id`'s
   * chain before its own input, `previous_response_id` and `background` taken off, `store: false`
   * (the upstream keeps no second copy, whose id the caller could not use). Undefined for other endpoints.
   */
  async prepare(parsed: Parsed): Promise<Parsed | Failed | undefined> {
    if (parsed.incoming.endpoint.name !== 'responses') return undefined;
    const { forward } = parsed.request;
    const store = forward.store !== false;
    const background = forward.background === true;
    const refused = backgroundRefusal(store, background, parsed.request.stream);
    if (refused) return { failed: refused, at: parsed };
    const previous = typeof forward.previous_response_id === 'string' ? forward.previous_response_id : null;
    const { previous_response_id: _p, background: _b, ...rest } = forward;
    const resolved = await resolveReferences(this.rows, forward.input, parsed.caller).catch((err: unknown) => {
      this.warnFailed('item references not resolved: the store failed', '', err);
      return storeUnavailable('item_reference: the stored responses cannot be read now; try again');
    });
    if (resolved instanceof ProxyError) return { failed: resolved, at: parsed };
    let input = resolved.sent;
    if (previous) {
      const history = await historyOf(this.rows, previous, (row) => mayRead(parsed.caller, row), this.history).catch(
        (err: unknown) => {
          this.warnFailed('previous response not read: the store failed', previous, err);
          return storeUnavailable('previous_response_id: the stored responses cannot be read now; try again');
        },
      );
      if (history instanceof ProxyError) return { failed: history, at: parsed };
      const own = typeof input === 'string' ? [{ role: 'user', content: input }] : Array.isArray(input) ? input : [];
      input = [...history, ...own];
    }
    const request = {
      ...parsed.request,
      forward: { ...rest, ...(input === undefined ? {} : { input }), store: false },
    };
    if (previous) {
      // The conversation is held like a body of its size until the upstream has it.
      try {
        const bytes = Buffer.byteLength(JSON.stringify(request.forward));
        parsed.reservation.atLeast(bytes * BODY_MEMORY_FACTOR, historyNeverFits);
      } catch (err) {
        if (err instanceof ProxyError) return { failed: err, at: parsed };
        throw err;
      }
    }
    const stamp = { id: newId('resp'), previousResponseId: previous, store, background };
    this.turns.set(request, { stamp, owner: ownerOf(parsed.caller), input: inputItems(resolved.own) });
    return { ...parsed, request };
  }

  /** The request was replaced by another of the same turn (its guardrails redacted it): its turn goes with it. */
  carry(from: ParsedRequest, to: ParsedRequest): void {
    const turn = this.turns.get(from);
    if (turn) this.turns.set(to, turn);
  }

  private get history(): HistoryBounds {
    return this.settings.history ?? HISTORY_BOUNDS;
  }

  /**
   * Before the call: a Responses request the gateway keeps goes only where its id and state can
   * be honoured (the OpenAI dialect's upstreams); the refusal, or undefined to go on.
   */
  check(backends: Backends, routed: Routed): Failed | undefined {
    if (!this.turns.get(routed.request)) return undefined;
    const refused = openAiOnlyRefusal(backends, routed);
    return refused ? { failed: refused, at: routed } : undefined;
  }

  /** Whether the request asked to run in the background (answered queued at once, finished later). */
  inBackground(routed: Routed): boolean {
    return this.turns.get(routed.request)?.stamp.background === true;
  }

  /** A background request: its queued response kept and answered now, `run` (the call) finishing it later. */
  background(routed: Routed, run: (routed: Routed) => Promise<Answered | Failed>): Promise<Answered | Failed> {
    const turn = this.turns.get(routed.request);
    return turn ? runInBackground(this, routed, turn, run) : run(routed);
  }

  /**
   * After the call: the answer given the gateway's id and the previous_response_id it continues
   * (the upstream was sent neither), and kept when `store` asks (a stream's once it ended).
   */
  async keep(routed: Routed, outcome: Answered | Failed): Promise<Answered | Failed> {
    const turn = this.turns.get(routed.request);
    if (!turn || 'failed' in outcome) return outcome;
    const { store } = turn.stamp;
    const { result } = outcome;
    if (result.kind === 'stream') {
      const save = async (response: Json) => {
        if (store) await this.save(turn, response);
      };
      // Stamped where the relay reads its events (each parsed once, the stream still pushed);
      // a body that reads none (a translator's, a cached answer's) is tapped and read here.
      const edit = stampEvents(turn.stamp, save);
      const inPlace = !(result.body instanceof ReadableStream) && result.body.editEvents?.(edit);
      const body = inPlace ? result.body : tapStream(result.body, edit);
      return { ...outcome, result: { ...result, body } };
    }
    // As the caller gets it: the accounting stage conforms it to the spec the same way (a no-op on this value).
    const response = conformAnswer('openai-responses', stamped(result.body, turn.stamp)) as Json;
    // Serialized once: the stored row's text is the answer's body too.
    const text = JSON.stringify(response);
    const stored = store ? await this.save(turn, response, text) : true;
    const headers = stored === true ? result.headers : { ...result.headers, [STORED_HEADER]: `false; ${stored}` };
    return { ...outcome, result: { ...result, body: response, raw: text, ...(headers ? { headers } : {}) } };
  }

  /** The row of a turn's response. */
  rowOf(
    turn: Turn,
    response: Json,
    status = String(response.status ?? 'completed'),
    text = JSON.stringify(response),
  ): NewRow {
    const created = Date.now();
    return {
      id: turn.stamp.id,
      owner: turn.owner,
      created,
      expires: created + this.retentionMs,
      status,
      background: turn.stamp.background,
      response: text,
      input: JSON.stringify(turn.input),
      items: itemIds(response, turn.input),
    };
  }

  /** Stores a turn's response: true, or why not (too large, the store failing); never throws. */
  async save(turn: Turn, response: Json, text?: string): Promise<true | string> {
    const row = this.rowOf(turn, response, undefined, text);
    const bytes = rowBytes(row);
    if (bytes > this.maxBytes) {
      this.log?.warn('response not stored: larger than the bound', { id: row.id, bytes, maxBytes: this.maxBytes });
      return `too large (${bytes} bytes, at most ${this.maxBytes})`;
    }
    try {
      await this.rows.put(row);
      return true;
    } catch (err) {
      this.warnFailed('response not stored: the store failed', row.id, err);
      return 'the store failed';
    }
  }

  /** The store's failure in a log line: its id and the error's class, never what was stored (an SQL error may quote it). */
  warnFailed(message: string, id: string, err: unknown): void {
    this.log?.warn(message, { id, error: err instanceof Error ? err.name : 'error' });
  }

  /** Deletes expired rows now and hourly; returns the stop. */
  sweepHourly(): () => void {
    const sweep = () =>
      this.rows.sweep(Date.now()).catch((err: unknown) => this.warnFailed('stored responses not swept', '', err));
    void sweep();
    const timer = setInterval(sweep, 3_600_000);
    timer.unref();
    return () => clearInterval(timer);
  }

  /** Background responses still running here end as failed (their caller polls and sees why). */
  async close(): Promise<void> {
    for (const controller of this.running.values()) controller.abort(new Error('gateway stopping'));
    const waiting = [...this.running.keys()];
    await Promise.all(
      waiting.map((id) =>
        this.rows
          .settle(id, 'failed', JSON.stringify(stoppedResponse(id)))
          .catch((err: unknown) => this.warnFailed('background response not settled', id, err)),
      ),
    );
  }
}

/** A background response's record when the gateway stopped under it. */
const stoppedResponse = (id: string): Json => ({
  id,
  object: 'response',
  status: 'failed',
  background: true,
  error: { code: 'server_error', message: 'the gateway stopped while the response was running: send it again' },
  output: [],
});

/**
 * The store of responses does not answer: a 503 to try again once it is back (a database restarts
 * or fails over in seconds), never the store's own error text.
 */
export const storeUnavailable = (message: string): ProxyError =>
  new ProxyError(503, 'api_error', 'store_unavailable', message, null, { 'Retry-After': '5' });

const historyNeverFits: NeverFits = (mostBytes) =>
  new ProxyError(
    413,
    'invalid_request_error',
    'request_too_large',
    `the conversation along previous_response_id is larger than this gateway replica's memory for requests allows (at most ${Math.floor(mostBytes / BODY_MEMORY_FACTOR)} bytes): start a new one`,
    'previous_response_id',
  );

function backgroundRefusal(store: boolean, background: boolean, stream: boolean): ProxyError | undefined {
  if (!background) return undefined;
  if (stream)
    return new ProxyError(
      400,
      'invalid_request_error',
      'unsupported_parameter',
      'stream is not supported with background: true on this gateway: create the response in the background, then poll GET /openai/v1/responses/{id}',
      'stream',
    );
  if (!store)
    return new ProxyError(
      400,
      'invalid_request_error',
      'invalid_request',
      'background: true needs store: true (the response is kept to be polled)',
      'store',
    );
  return undefined;
}

/** Tool kinds any Responses server runs (the caller's own code does); the others are OpenAI's hosted tools. */
const CALLER_TOOLS = new Set(['function', 'custom', 'namespace']);

/**
 * What only OpenAI itself, served natively, can do: resolve `prompt` (one of its stored prompt
 * templates) and run its hosted tools (web search, file search, code interpreter, ...). Elsewhere
 * a 400 naming the field: a server that does not run them (Ollama echoes them and answers without)
 * would leave the caller believing they ran.
 */
function openAiOnlyRefusal(backends: Backends, routed: Routed): ProxyError | undefined {
  const { prompt, tools } = routed.request.forward;
  const hosted = Array.isArray(tools)
    ? tools.findIndex((t) => !CALLER_TOOLS.has(String((t as Json | null)?.type)))
    : -1;
  const hasPrompt = prompt !== undefined && prompt !== null;
  if (!hasPrompt && hosted < 0) return undefined;
  const first = routed.chain[0];
  if (first && !(first.plan instanceof ProxyError) && !first.plan.translator) {
    const { system } = backendOf(backends, first.route).who(first.route);
    if (system && OPENAI_NATIVE_SYSTEMS.has(system)) return undefined;
  }
  const model = routed.route.model;
  if (hasPrompt)
    return new ProxyError(
      400,
      'invalid_request_error',
      'unsupported_parameter',
      `prompt (a prompt template stored at OpenAI) can only be resolved by OpenAI itself, and ${model} is not served by OpenAI's Responses API: send the instructions and input themselves`,
      'prompt',
    );
  const type = String(((tools as unknown[])[hosted] as Json | null)?.type).slice(0, 64);
  return new ProxyError(
    400,
    'invalid_request_error',
    'unsupported_parameter',
    `tools[${hosted}] is a ${type} tool, hosted by OpenAI, and ${model} is not served by OpenAI's Responses API: this model takes function and custom tools`,
    `tools[${hosted}]`,
  );
}
