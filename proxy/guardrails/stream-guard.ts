import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { isRecord } from '../../crds/is-record.js';
import { type CallerDialect, DIALECTS } from '../endpoints/dialects.js';
import type { ProxyError } from '../endpoints/errors.js';
import { type ChunkSource, chunksOf, type StreamBody } from '../upstreams/chunk-source.js';
import type { StreamOutcome } from '../upstreams/upstream.js';
import { type Cause, type Checking, checkText, inJsonString } from './check-text.js';
import type { GuardrailCalls } from './checker.js';
import type { CompiledGuardrail } from './guardrail-set.js';
import { judgeTexts, type OnCheckFailed } from './judging.js';
import { isFinal, STREAM_TEXTS, type StreamTexts, type TextAt } from './stream-texts.js';

/**
 * A streamed answer through its guardrails, as it streams. Each key's text (a choice's content,
 * a tool call's arguments, a content block: proxy/guardrails/stream-texts.ts) is held back by the
 * guardrails' look-behind and released once the text after it is seen, never cutting through a
 * finding nor through a word (a token longer than the look-behind is held whole), and checked
 * with what went out before it as context; the rest goes out when its key ends. Redact and Mask
 * change what is released; a Block ends the stream with the dialect's error event, and the
 * request's record says so. Events keep everything else they carry (a role, a tool call's id);
 * comments and event ids pass as they came. Log probabilities are withheld.
 *
 * Judges and services (checker.ts) read the whole answer: where a guardrail has them, the event
 * that ends the stream is held until they judged what was sent. What they find cannot be taken
 * back from the caller's screen, so a finding that Blocks, Redacts or Masks ends the stream with
 * the dialect's error event instead of its end (the caller's SDK raises it, the record says so),
 * as does a checker that fails closed and could not answer.
 */

/** How the stream's judges and services are asked, and the error of one that fails closed. */
export interface StreamAsking {
  calls: GuardrailCalls;
  onFailed: OnCheckFailed;
  unavailableError: (cause: Cause) => ProxyError;
}

export function guardStream(
  dialect: CallerDialect,
  body: StreamBody,
  outcome: Promise<StreamOutcome>,
  guardrails: readonly CompiledGuardrail[],
  checking: Checking,
  blockedError: (cause: Cause) => ProxyError,
  asking?: StreamAsking,
): { body: StreamBody; outcome: Promise<StreamOutcome> } {
  const texts = STREAM_TEXTS[dialect];
  if (!texts || guardrails.length === 0) return { body, outcome };
  const asked = asking && guardrails.some((g) => g.checkers.length > 0) ? asking : undefined;
  const guard = new StreamGuard(dialect, texts, guardrails, checking, blockedError, asked !== undefined);
  const source = chunksOf(body);
  const encoder = new TextEncoder();
  const decoder = new TextDecoder();
  let done = false;
  // The relay settles its outcome before it hands over its last chunk: the guard's verdict on
  // that chunk is known only once this side finished (or its reader left).
  let finished: () => void = () => {};
  const guardDone = new Promise<void>((resolve) => {
    finished = resolve;
  });
  const end = () => {
    done = true;
    finished();
  };
  const guarded: ChunkSource = {
    read: async () => {
      while (!done) {
        const chunk = await source.read().catch((err: unknown) => {
          end();
          throw err;
        });
        if (chunk === undefined) {
          guard.feed(decoder.decode());
          guard.finish();
          if (asked) await judgeSent(guard, guardrails, checking, asked);
          end();
        } else guard.feed(decoder.decode(chunk, { stream: true }));
        if (guard.blocked && !done) {
          end();
          source.cancel();
        }
        const out = guard.take();
        if (out) return encoder.encode(out);
      }
      return undefined;
    },
    cancel: () => {
      end();
      source.cancel();
    },
  };
  return {
    body: guarded,
    outcome: Promise.all([outcome, guardDone]).then(([o]) =>
      guard.blocked ? { ...o, error: guard.blocked, clientAborted: false } : o,
    ),
  };
}

/** The whole answer as sent, through the guardrails' judges and services: its held end released, or the stream ended with an error. */
async function judgeSent(
  guard: StreamGuard,
  guardrails: readonly CompiledGuardrail[],
  checking: Checking,
  asking: StreamAsking,
): Promise<void> {
  if (guard.blocked) return;
  const texts = guard.sentTexts();
  const judged = await judgeTexts(
    guardrails,
    (t: string[], f) => t.map((x) => f(x)),
    texts,
    'answer',
    checking,
    asking.calls,
    asking.onFailed,
    { shown: true },
  );
  if ('blocked' in judged) guard.block(judged.blocked);
  else if ('unavailable' in judged) guard.end(asking.unavailableError(judged.unavailable));
  else guard.releaseFinal();
}

/** Characters of a key's released text kept as context for what follows it. */
const CONTEXT_CHARS = 256;
/** The most of an open PEM block kept as context (its BEGIN line makes the body after it a finding). */
const MAX_PEM_CONTEXT = 16 * 1024;

/**
 * What went out, as context for what follows: its last CONTEXT_CHARS; from the last BEGIN line of
 * a private key not yet ended, so that the whole body of a key is still found line after line.
 */
function contextOf(sent: string): string {
  const begin = sent.lastIndexOf('-----BEGIN');
  if (begin !== -1 && sent.indexOf('-----END', begin) === -1 && sent.length - begin <= MAX_PEM_CONTEXT)
    return sent.slice(begin);
  return sent.slice(-CONTEXT_CHARS);
}

/**
 * Where the text that may still grow into a finding begins: the last token (a key, an address, a
 * word: held whole until a space ends it), and before it the groups of digits a card, an IBAN or
 * a phone number is written in, at most `lookBehind` characters. Everything before goes out now:
 * the caller waits for one word, not for a window.
 */
function pending(held: string, lookBehind: number): number {
  let at = held.length;
  while (at > 0 && /\S/.test(held[at - 1] ?? '')) at--;
  for (;;) {
    const sep = held[at - 1];
    if (sep !== ' ' && sep !== '-') break;
    let start = at - 1;
    while (start > 0 && /\S/.test(held[start - 1] ?? '') && held[start - 1] !== '-') start--;
    const group = held.slice(start, at - 1);
    if (group === '' || !/\d/.test(group) || held.length - start > lookBehind) break;
    at = start;
  }
  return at;
}

interface KeyState {
  /** Text not yet released, as the upstream sent it. */
  held: string;
  /** What went out, as the caller got it (a Responses done event repeats it). */
  sent: string;
  /** The end of what went out, as the upstream sent it: context for the next release. */
  context: string;
  /** A JSON text (tool arguments): whether what went out ends inside a string. */
  json?: { inString: boolean };
  skeleton: TextAt['skeleton'];
}

class StreamGuard {
  blocked: ProxyError | undefined;
  private out = '';
  private readonly keys = new Map<string, KeyState>();
  private readonly lookBehind: number;
  private readonly parser = createParser({
    onEvent: (e) => this.event(e),
    onComment: (c) => {
      if (!this.blocked) this.out += `:${c}\n\n`;
    },
    onRetry: (ms) => {
      if (!this.blocked) this.out += `retry: ${ms}\n\n`;
    },
  });
  private sequence = 0;
  /** The events that end the stream, held while judges and services read the answer. */
  private final = '';

  constructor(
    private readonly dialect: CallerDialect,
    private readonly texts: StreamTexts,
    private readonly guardrails: readonly CompiledGuardrail[],
    private readonly checking: Checking,
    private readonly blockedError: (cause: Cause) => ProxyError,
    private readonly holdsFinal = false,
  ) {
    this.lookBehind = Math.max(...guardrails.map((g) => g.lookBehind));
  }

  feed(text: string): void {
    if (!this.blocked && text) this.parser.feed(text);
  }

  /** The source ended: what is still held goes out, in events of its own. */
  finish(): void {
    if (this.blocked) return;
    this.parser.feed('\n\n');
    this.flushUnder(undefined);
  }

  take(): string {
    const out = this.out;
    this.out = '';
    return out;
  }

  /** Every key's text as the caller got it. */
  sentTexts(): string[] {
    return [...this.keys.values()].map((k) => k.sent);
  }

  /** The held end of the stream goes out. */
  releaseFinal(): void {
    this.out += this.final;
    this.final = '';
  }

  private event(e: EventSourceMessage): void {
    if (this.blocked) return;
    let data: unknown;
    try {
      data = JSON.parse(e.data);
    } catch {
      // [DONE], or what is not JSON: after every key's held text.
      if (!this.flushUnder(undefined)) return;
      this.emit(e, e.data);
      return;
    }
    if (!isRecord(data)) {
      this.emit(e, e.data);
      return;
    }
    this.texts.withhold(data);
    const ends = this.texts.ends(data);
    for (const d of this.texts.deltas(data)) {
      const state = this.state(d);
      state.held += d.text;
      const released = this.release(
        d.key,
        state,
        ends.some((k) => under(d.key, k)),
      );
      if (released === undefined) return;
      // The event goes on with what else it carries (a role, a tool call's id), its text what is released now.
      d.put(released);
    }
    for (const key of ends) if (!this.flushUnder(key)) return;
    for (const w of this.texts.wholes(data)) {
      const sent = this.keys.get(w.key)?.sent;
      if (sent !== undefined) w.put(sent);
      else {
        const checked = checkText(this.guardrails, w.text, 'answer', this.checking, { json: w.json ?? false });
        if ('blocked' in checked) {
          this.block(checked.blocked);
          return;
        }
        w.put(checked.text);
      }
    }
    this.emit(e, data);
  }

  private state(d: TextAt): KeyState {
    let state = this.keys.get(d.key);
    if (!state) {
      state = {
        held: '',
        sent: '',
        context: '',
        skeleton: d.skeleton,
        ...(d.json ? { json: { inString: false } } : {}),
      };
      this.keys.set(d.key, state);
    }
    return state;
  }

  /** The key's held text through the guardrails, all of it or what the look-behind lets go; undefined once blocked. */
  private release(key: string, state: KeyState, all: boolean): string | undefined {
    const { held } = state;
    const cut = all ? held.length : this.safeCut(state.context, held, pending(held, this.lookBehind));
    if (cut <= 0) return '';
    const part = held.slice(0, cut);
    const checked = checkText(this.guardrails, part, 'answer', this.checking, {
      before: state.context,
      ...(state.json ? { json: true, inString: state.json.inString } : {}),
    });
    if ('blocked' in checked) {
      this.block(checked.blocked);
      return undefined;
    }
    state.held = held.slice(cut);
    state.sent += checked.text;
    state.context = contextOf(state.context + part);
    if (state.json) state.json.inString = inJsonString(checked.text, checked.text.length, state.json.inString);
    this.keys.set(key, state);
    return checked.text;
  }

  /** Where to cut the held text: never inside a finding (over what went out before it too), nor inside a token still arriving. */
  private safeCut(context: string, held: string, cut: number): number {
    if (cut <= 0) return 0;
    let at = cut;
    const scanned = context + held;
    for (const g of this.guardrails)
      for (const s of g.detect(scanned)) {
        const start = s.start - context.length;
        const end = s.end - context.length;
        if (start < at && end > at) at = Math.max(0, start);
      }
    while (at > 0 && /\S/.test(held[at - 1] ?? '') && /\S/.test(held[at] ?? '')) at--;
    return at;
  }

  /** Every key under `prefix` (all keys when undefined) ended: their held text goes out in events of their own. */
  private flushUnder(prefix: string | undefined): boolean {
    for (const [key, state] of this.keys) {
      if (state.held === '' || (prefix !== undefined && !under(key, prefix))) continue;
      const released = this.release(key, state, true);
      if (released === undefined) return false;
      if (released === '') continue;
      const event = state.skeleton(released);
      this.emit({ event: event.name }, event.data);
    }
    return true;
  }

  block(cause: Cause): void {
    this.end(this.blockedError(cause));
  }

  /** The stream ends with the dialect's error event for `error`, not its own end. */
  end(error: ProxyError): void {
    this.blocked = error;
    this.final = '';
    const spec = DIALECTS[this.dialect];
    const event = spec.streamError(this.blocked);
    // Responses' events are numbered: its error event takes the next number.
    this.out +=
      this.dialect === 'openai-responses'
        ? event.replace('"sequence_number":0', `"sequence_number":${this.sequence++}`)
        : event;
    this.out += spec.streamEnd;
  }

  private emit(
    e: { event?: string | undefined; id?: string | undefined },
    data: string | Record<string, unknown>,
  ): void {
    let text = data;
    if (typeof data !== 'string') {
      // Responses' events are numbered: a held text's event makes one more, so all are renumbered.
      if (typeof data.sequence_number === 'number') data.sequence_number = this.sequence++;
      text = JSON.stringify(data);
    }
    const lines = String(text)
      .split('\n')
      .map((l) => `data: ${l}`)
      .join('\n');
    const event = `${e.event ? `event: ${e.event}\n` : ''}${e.id ? `id: ${e.id}\n` : ''}${lines}\n\n`;
    if (this.holdsFinal && (this.final !== '' || isFinal(data))) this.final += event;
    else this.out += event;
  }
}

/** `key` is `prefix` or a key under it (`c0:t1` under `c0`). */
const under = (key: string, prefix: string) => key === prefix || key.startsWith(`${prefix}:`);
