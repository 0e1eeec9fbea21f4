import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { isRecord } from '../../crds/is-record.js';
import { type CallerDialect, DIALECTS } from '../endpoints/dialects.js';
import type { ProxyError } from '../endpoints/errors.js';
import { type ChunkSource, chunksOf, type StreamBody } from '../upstreams/chunk-source.js';
import type { StreamOutcome } from '../upstreams/upstream.js';
import { type Cause, type Checking, checkText } from './check-text.js';
import type { CompiledGuardrail } from './guardrail-set.js';
import { STREAM_TEXTS, type StreamTexts } from './stream-texts.js';

/**
 * A streamed answer through its guardrails, as it streams. Each key's text (a choice, a content
 * block: proxy/guardrails/stream-texts.ts) is held back by the guardrails' look-behind and released
 * once the text after it is seen, never cutting through a finding, so that what straddles two
 * chunks (a key split in half) is still caught whole; the rest goes out when its key ends. Redact
 * and Mask change what is released; a Block ends the stream with the dialect's error event, and
 * the request's record says so. Events that carry no answer text pass as they came.
 */

export function guardStream(
  dialect: CallerDialect,
  body: StreamBody,
  outcome: Promise<StreamOutcome>,
  guardrails: readonly CompiledGuardrail[],
  checking: Checking,
  blockedError: (cause: Cause) => ProxyError,
): { body: StreamBody; outcome: Promise<StreamOutcome> } {
  const texts = STREAM_TEXTS[dialect];
  if (!texts || guardrails.length === 0) return { body, outcome };
  const guard = new StreamGuard(dialect, texts, guardrails, checking, blockedError);
  const source = chunksOf(body);
  const encoder = new TextEncoder();
  const decoder = new TextDecoder();
  let done = false;
  const guarded: ChunkSource = {
    read: async () => {
      while (!done) {
        const chunk = await source.read();
        if (chunk === undefined) {
          done = true;
          guard.finish();
        } else guard.feed(decoder.decode(chunk, { stream: true }));
        if (guard.blocked && !done) {
          done = true;
          source.cancel();
        }
        const out = guard.take();
        if (out) return encoder.encode(out);
      }
      return undefined;
    },
    cancel: () => {
      done = true;
      source.cancel();
    },
  };
  return {
    body: guarded,
    outcome: outcome.then((o) => (guard.blocked ? { ...o, error: guard.blocked, clientAborted: false } : o)),
  };
}

class StreamGuard {
  blocked: ProxyError | undefined;
  private out = '';
  private readonly held = new Map<string, string>();
  private readonly sent = new Map<string, string>();
  /** Each key's last delta event, with its event name: what a key's held text goes out in when its key ends. */
  private readonly templates = new Map<string, { name: string | undefined; data: string }>();
  private readonly lookBehind: number;
  private readonly parser = createParser({ onEvent: (e) => this.event(e) });
  private sequence = 0;

  constructor(
    private readonly dialect: CallerDialect,
    private readonly texts: StreamTexts,
    private readonly guardrails: readonly CompiledGuardrail[],
    private readonly checking: Checking,
    private readonly blockedError: (cause: Cause) => ProxyError,
  ) {
    this.lookBehind = Math.max(...guardrails.map((g) => g.lookBehind));
  }

  feed(text: string): void {
    if (!this.blocked) this.parser.feed(text);
  }

  /** The source ended: what is still held goes out, in its keys' last events. */
  finish(): void {
    if (this.blocked) return;
    this.parser.feed('\n\n');
    for (const key of [...this.held.keys()]) if (!this.flush(key)) return;
  }

  take(): string {
    const out = this.out;
    this.out = '';
    return out;
  }

  private event(e: EventSourceMessage): void {
    if (this.blocked) return;
    let data: unknown;
    try {
      data = JSON.parse(e.data);
    } catch {
      // [DONE], or what is not JSON: after every key's held text.
      for (const key of [...this.held.keys()]) if (!this.flush(key)) return;
      this.emit(e.event, e.data);
      return;
    }
    if (!isRecord(data)) {
      this.emit(e.event, e.data);
      return;
    }
    const ends = this.texts.ends(data);
    let carried = false;
    for (const d of this.texts.deltas(data)) {
      this.templates.set(d.key, { name: e.event, data: e.data });
      this.held.set(d.key, (this.held.get(d.key) ?? '') + d.text);
      const released = this.release(d.key, ends.includes(d.key));
      if (released === undefined) return;
      d.put(released);
      carried ||= released !== '';
      if (ends.includes(d.key)) this.held.delete(d.key);
    }
    for (const key of ends) if (this.held.has(key) && !this.flush(key)) return;
    for (const w of this.texts.wholes(data)) {
      const sent = this.sent.get(w.key);
      if (sent !== undefined) w.put(sent);
      else {
        const checked = checkText(this.guardrails, w.text, 'answer', this.checking);
        if ('blocked' in checked) {
          this.block(checked.blocked);
          return;
        }
        w.put(checked.text);
      }
    }
    // An event whose every delta is held goes nowhere: its text goes out later, in another.
    if (!carried && ends.length === 0 && this.texts.deltas(data).length > 0) return;
    this.emit(e.event, data);
  }

  /** The key's held text through the guardrails, all of it or what the look-behind lets go; undefined once blocked. */
  private release(key: string, all: boolean): string | undefined {
    const held = this.held.get(key) ?? '';
    const cut = all ? held.length : this.safeCut(held, held.length - this.lookBehind);
    if (cut <= 0) return '';
    const checked = checkText(this.guardrails, held.slice(0, cut), 'answer', this.checking);
    if ('blocked' in checked) {
      this.block(checked.blocked);
      return undefined;
    }
    this.held.set(key, held.slice(cut));
    this.sent.set(key, (this.sent.get(key) ?? '') + checked.text);
    return checked.text;
  }

  /** Where to cut the held text: never inside a finding, nor inside a word. */
  private safeCut(held: string, cut: number): number {
    if (cut <= 0) return 0;
    let at = cut;
    for (const g of this.guardrails) for (const s of g.detect(held)) if (s.start < at && s.end > at) at = s.start;
    const floor = Math.max(0, at - 64);
    while (at > floor && /\w/.test(held[at - 1] ?? '') && /\w/.test(held[at] ?? '')) at--;
    return at === floor && floor > 0 ? cut : at;
  }

  /** A key ended (or the stream did): its held text goes out in a copy of its last delta event. */
  private flush(key: string): boolean {
    const released = this.release(key, true);
    this.held.delete(key);
    if (released === undefined) return false;
    const template = this.templates.get(key);
    if (released === '' || !template) return true;
    const data = JSON.parse(template.data) as Record<string, unknown>;
    const d = this.texts.deltas(data).find((x) => x.key === key);
    d?.put(released);
    for (const c of Array.isArray(data.choices) ? data.choices : []) if (isRecord(c)) c.finish_reason = null;
    this.emit(template.name, data);
    return true;
  }

  private block(cause: Cause): void {
    this.blocked = this.blockedError(cause);
    const spec = DIALECTS[this.dialect];
    this.out += spec.streamError(this.blocked) + spec.streamEnd;
  }

  private emit(name: string | undefined, data: string | Record<string, unknown>): void {
    let text = data;
    if (typeof data !== 'string') {
      // Responses' events are numbered: a held text's event makes one more, so all are renumbered.
      if (typeof data.sequence_number === 'number') data.sequence_number = this.sequence++;
      text = JSON.stringify(data);
    }
    this.out += `${name ? `event: ${name}\n` : ''}data: ${text}\n\n`;
  }
}
