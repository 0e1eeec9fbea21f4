import type { Dispatcher } from 'undici';
import { describe, expect, it } from 'vitest';
import { type CallerDialect, DIALECTS } from '../endpoints/dialects.js';
import { ProxyError } from '../endpoints/errors.js';
import type { ChunkSink } from './chunk-source.js';
import { StreamedBody } from './dispatch.js';
import { PASS_THROUGH } from './openai-compatible-dialects.js';
import { SseRelay } from './sse-relay.js';
import { type EventEdit, sseData } from './stream-reader.js';

/** The relay against a hand-fed upstream body: what the caller receives, and what the gateway accounts. */

const chunk = (content: string, i = 0) =>
  `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":${i},"delta":{"content":${JSON.stringify(content)}},"finish_reason":null}]}\n\n`;
const USAGE =
  'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}\n\n';
const DONE = 'data: [DONE]\n\n';

function upstream() {
  const calls: string[] = [];
  const controller = {
    pause: () => calls.push('pause'),
    resume: () => calls.push('resume'),
    abort: () => {
      calls.push('abort');
      body.fail(new Error('aborted'));
    },
  } as unknown as Dispatcher.DispatchController;
  const body = new StreamedBody(() => controller);
  return { body, calls };
}

function relayOf(body: StreamedBody, clientWantsUsage = false, dialect: CallerDialect = 'openai-chat') {
  const spec = DIALECTS[dialect];
  return new SseRelay(
    body,
    {
      reader: PASS_THROUGH[dialect].reader(clientWantsUsage),
      streamError: (e) => spec.streamError(e),
      ...(spec.streamEnd ? { streamEnd: spec.streamEnd } : {}),
    },
    {
      transport: () => new ProxyError(502, 'api_error', 'upstream_error', 'transport'),
      broken: () => new ProxyError(502, 'api_error', 'upstream_stream_broken', 'ended early'),
      unreadable: () => new ProxyError(502, 'api_error', 'upstream_error', 'not JSON'),
    },
    performance.now(),
  );
}

/** A sink that records what it is given; `full` makes its writes report a full socket. */
function sink(full = false) {
  const written: Uint8Array[] = [];
  let ended = 0;
  let drained: (() => void) | undefined;
  const s: ChunkSink = {
    write: (c) => {
      written.push(c);
      return !full;
    },
    onceDrained: (resume) => {
      drained = resume;
    },
    end: () => {
      ended++;
    },
  };
  return {
    s,
    written,
    text: () => Buffer.concat(written).toString('utf8'),
    ended: () => ended,
    drain: () => drained?.(),
  };
}

async function pulled(relay: SseRelay): Promise<string> {
  const parts: Uint8Array[] = [];
  for (let c = await relay.read(); c !== undefined; c = await relay.read()) parts.push(c);
  return Buffer.concat(parts).toString('utf8');
}

/** An event of a named dialect as Ollama 0.17 writes it: `event:` and one `data:` line. */
const named = (name: string, data: Record<string, unknown>) =>
  `event: ${name}\ndata: ${JSON.stringify({ type: name, ...data })}\n\n`;
const textDelta = (delta: string, logprobs = true) =>
  named('response.output_text.delta', {
    sequence_number: 4,
    item_id: 'msg_1',
    output_index: 0,
    content_index: 0,
    delta,
    ...(logprobs ? { logprobs: [] } : {}),
  });
const completed = named('response.completed', {
  sequence_number: 9,
  response: {
    id: 'resp_1',
    object: 'response',
    status: 'completed',
    usage: { input_tokens: 7, output_tokens: 2, total_tokens: 9 },
  },
});
const blockDelta = (text: string) => named('content_block_delta', { index: 0, delta: { type: 'text_delta', text } });

describe('SseRelay', () => {
  it('passes a chunk of token events on as the very buffer that came in', async () => {
    const { body } = upstream();
    const relay = relayOf(body);
    const out = sink();
    relay.pipe(out.s);
    const buf = Buffer.from(chunk('a') + chunk('b') + chunk('c'));
    body.push(buf);
    expect(out.written).toHaveLength(1);
    expect(out.written[0]).toBe(buf);
    body.push(Buffer.from(USAGE + DONE));
    body.end();
    expect(out.text()).toBe(chunk('a') + chunk('b') + chunk('c') + DONE);
    // The usage chunk the gateway asked for is read, and not passed to a caller that did not ask.
    expect(await relay.settled).toMatchObject({ usage: { promptTokens: 5, completionTokens: 3 } });
    expect(out.ended()).toBe(1);
  });

  it('passes named deltas (Responses, Messages) on as the very buffer that came in, and counts their tokens', async () => {
    const { body } = upstream();
    const relay = relayOf(body, false, 'openai-responses');
    const out = sink();
    relay.pipe(out.s);
    const deltas = Buffer.from(textDelta('Hel') + textDelta('lo'));
    body.push(deltas);
    expect(out.written).toHaveLength(1);
    expect(out.written[0]).toBe(deltas);
    body.push(Buffer.from(completed));
    body.end();
    const outcome = await relay.settled;
    expect(outcome.firstTokenMs).toBeGreaterThanOrEqual(0);
    expect(outcome.usage).toMatchObject({ promptTokens: 7, completionTokens: 2 });

    const messages = upstream();
    const relayed = relayOf(messages.body, false, 'anthropic-messages');
    const caller = sink();
    relayed.pipe(caller.s);
    const block = Buffer.from(blockDelta('Hi') + named('content_block_stop', { index: 0 }));
    messages.body.push(block);
    expect(caller.written[0]).toBe(block);
    messages.body.push(
      Buffer.from(
        named('message_delta', {
          delta: { stop_reason: 'end_turn', stop_sequence: null },
          usage: { output_tokens: 1 },
        }) + named('message_stop', {}),
      ),
    );
    messages.body.end();
    expect((await relayed.settled).usage).toMatchObject({ completionTokens: 1 });
  });

  it('reads a named delta the spec wants mended, or framed otherwise, and sends what the parse makes of it', async () => {
    const { body } = upstream();
    const relay = relayOf(body, false, 'openai-responses');
    const out = sink();
    relay.pipe(out.s);
    // No logprobs: the spec requires them, so the delta is read and given an empty list.
    body.push(Buffer.from(textDelta('a', false)));
    // `event:` without its space is SSE too: read by the parser, and written back in the usual frame.
    body.push(Buffer.from(textDelta('b').replace('event: ', 'event:')));
    body.push(Buffer.from(completed));
    body.end();
    await relay.settled;
    const mended = textDelta('a', false).replace('"delta":"a"', '"delta":"a","logprobs":[]');
    expect(out.text().startsWith(mended + textDelta('b'))).toBe(true);
  });

  it('relays an event split across chunks once, whole, and counts its token', async () => {
    const { body } = upstream();
    const relay = relayOf(body);
    const out = sink();
    relay.pipe(out.s);
    const all = chunk('hello') + chunk('') + chunk('world');
    for (const piece of [all.slice(0, 17), all.slice(17, 200), all.slice(200)]) body.push(Buffer.from(piece));
    body.end();
    expect(out.text().startsWith(all)).toBe(true);
    // Cut before [DONE]: an error event in the caller's dialect, then [DONE]; the two tokens are billed.
    expect(out.text().slice(all.length)).toContain('upstream_stream_broken');
    expect(out.text().endsWith(DONE)).toBe(true);
    const outcome = await relay.settled;
    expect(outcome.error?.code).toBe('upstream_stream_broken');
    expect(outcome.usage).toEqual({ promptTokens: 0, completionTokens: 2, counted: true });
  });

  it('keeps the usage chunk for a caller that asked for it', async () => {
    const { body } = upstream();
    const relay = relayOf(body, true);
    const out = sink();
    relay.pipe(out.s);
    body.push(Buffer.from(chunk('a') + USAGE + DONE));
    body.end();
    expect(out.text()).toBe(chunk('a') + USAGE + DONE);
  });

  it('reads a stream with CR line ends as text, with the same result', async () => {
    const { body } = upstream();
    const relay = relayOf(body);
    const out = sink();
    relay.pipe(out.s);
    const crlf = (s: string) => s.replaceAll('\n', '\r\n');
    body.push(Buffer.from(crlf(chunk('a') + chunk('b')).slice(0, 30)));
    body.push(Buffer.from(crlf(chunk('a') + chunk('b') + USAGE + DONE).slice(30)));
    body.end();
    expect(out.text()).toBe(chunk('a') + chunk('b') + DONE);
    expect((await relay.settled).usage).toMatchObject({ promptTokens: 5, completionTokens: 3 });
  });

  it('reads JSON an upstream sent on several data lines (pretty-printed) as the value it is, and sends it on one line', async () => {
    // Each event's JSON spread over `data:` lines, as the SSE spec allows (a server printing its JSON indented).
    const spread = (frame: string) => {
      const name = /^event: (.*)\n/.exec(frame)?.[1];
      const data = JSON.parse(frame.slice(frame.indexOf('data: ') + 6)) as unknown;
      const lines = JSON.stringify(data, null, 2)
        .split('\n')
        .map((l) => `data: ${l}`);
      return `${name ? `event: ${name}\n` : ''}${lines.join('\n')}\n\n`;
    };
    const eventsOf = (text: string) => {
      const events: { name: string | undefined; value: unknown; dataLines: number }[] = [];
      for (const e of text.split('\n\n').filter((x) => x.includes('data:'))) {
        const data = sseData(e);
        events.push({
          name: /^event: (.*)$/m.exec(e)?.[1],
          value: data === '[DONE]' ? data : JSON.parse(data),
          dataLines: e.split('\n').filter((l) => l.startsWith('data:')).length,
        });
      }
      return events;
    };

    const chat = upstream();
    const relay = relayOf(chat.body, true);
    const out = sink();
    relay.pipe(out.s);
    chat.body.push(Buffer.from(spread(chunk('a')) + spread(USAGE) + DONE));
    chat.body.end();
    const outcome = await relay.settled;
    expect(outcome.error).toBeUndefined();
    expect(outcome.usage).toMatchObject({ promptTokens: 5, completionTokens: 3 });
    expect(outcome.firstTokenMs).toBeGreaterThanOrEqual(0);
    expect(eventsOf(out.text())).toEqual(eventsOf(chunk('a') + USAGE + DONE));
    expect(eventsOf(out.text()).map((e) => e.dataLines)).toEqual([1, 1, 1]);

    // A Response event the edit wants is parsed and edited like a one-line one.
    const created = named('response.created', {
      sequence_number: 0,
      response: { id: 'resp_up', status: 'in_progress' },
    });
    const responses = upstream();
    const edited = relayOf(responses.body, false, 'openai-responses');
    edited.editEvents({
      wants: (name) => name === 'response.created',
      edit: (_name, data) => ({ data: { ...data, response: { ...(data.response as object), id: 'resp_ours' } } }),
    });
    const caller = sink();
    edited.pipe(caller.s);
    responses.body.push(Buffer.from(spread(created) + spread(textDelta('Hel')) + spread(completed)));
    responses.body.end();
    expect((await edited.settled).usage).toMatchObject({ promptTokens: 7, completionTokens: 2 });
    const events = eventsOf(caller.text());
    expect(events.map((e) => [e.name, e.dataLines])).toEqual([
      ['response.created', 1],
      ['response.output_text.delta', 1],
      ['response.completed', 1],
    ]);
    expect(events[0]?.value).toMatchObject({ type: 'response.created', response: { id: 'resp_ours' } });
    expect(events[1]?.value).toEqual(eventsOf(textDelta('Hel'))[0]?.value);
  });

  it('pauses the upstream while the caller’s socket is full, resumes once it drained', () => {
    const { body, calls } = upstream();
    const relay = relayOf(body);
    const out = sink(true);
    relay.pipe(out.s);
    body.push(Buffer.from(chunk('a')));
    expect(calls).toContain('pause');
    out.drain();
    expect(calls.at(-1)).toBe('resume');
  });

  it('ends the caller’s response once the upstream’s body ended, so its connection is free for the next', async () => {
    const { body } = upstream();
    const relay = relayOf(body);
    const out = sink();
    relay.pipe(out.s);
    body.push(Buffer.from(chunk('a') + USAGE + DONE));
    await relay.settled;
    // The last event went out; the chunked body's end has not arrived yet.
    expect(out.text().endsWith(DONE)).toBe(true);
    expect(out.ended()).toBe(0);
    body.end();
    await new Promise((r) => setImmediate(r));
    expect(out.ended()).toBe(1);
  });

  it('ends the caller’s response anyway when the upstream never ends its body, dropping that connection', async () => {
    const { body, calls } = upstream();
    const relay = relayOf(body);
    const out = sink();
    relay.pipe(out.s);
    body.push(Buffer.from(chunk('a') + DONE));
    await new Promise((r) => setTimeout(r, 1_200));
    expect(out.ended()).toBe(1);
    expect(calls).toContain('abort');
  });

  it('edits the events an edit wants, and holds the one it must wait for (and the end) until it may go, pushed or pulled', async () => {
    const created = named('response.created', {
      sequence_number: 0,
      response: { id: 'resp_up', status: 'in_progress' },
    });
    let release: () => void = () => {};
    const saved: string[] = [];
    const stamp = (): EventEdit => ({
      wants: (name) => name === 'response.created' || name === 'response.completed',
      edit: (name, data) => {
        const edited = { ...data, response: { ...(data.response as object), id: 'resp_ours' } };
        if (name !== 'response.completed') return { data: edited };
        return {
          data: edited,
          before: new Promise<void>((r) => {
            release = () => {
              saved.push(name);
              r();
            };
          }),
        };
      },
    });
    const all = created + textDelta('Hel') + completed;

    const pushed = upstream();
    const relay = relayOf(pushed.body, false, 'openai-responses');
    expect(relay.editEvents(stamp())).toBe(true);
    const out = sink();
    relay.pipe(out.s);
    pushed.body.push(Buffer.from(all));
    pushed.body.end();
    await new Promise((r) => setTimeout(r, 20));
    // Nothing of the chunk that holds the final event goes out before it may, nor the end.
    expect(out.text()).toBe('');
    expect(out.ended()).toBe(0);
    release();
    await relay.settled;
    await new Promise((r) => setImmediate(r));
    expect(saved).toEqual(['response.completed']);
    expect(out.ended()).toBe(1);
    const events = out
      .text()
      .split('\n\n')
      .filter((e) => e.includes('data:'))
      .map((e) => JSON.parse(e.slice(e.indexOf('data:') + 5)) as { type: string; response?: { id: string } });
    expect(events.map((e) => e.type)).toEqual(['response.created', 'response.output_text.delta', 'response.completed']);
    expect(events.filter((e) => e.response).map((e) => e.response?.id)).toEqual(['resp_ours', 'resp_ours']);
    // The delta, which the edit does not want, goes out as it came.
    expect(out.text()).toContain(textDelta('Hel'));

    const polled = upstream();
    const pulledRelay = relayOf(polled.body, false, 'openai-responses');
    pulledRelay.editEvents(stamp());
    polled.body.push(Buffer.from(all));
    polled.body.end();
    const text = pulled(pulledRelay);
    let done = false;
    void text.then(() => {
      done = true;
    });
    await new Promise((r) => setTimeout(r, 20));
    expect(done).toBe(false);
    release();
    expect(await text).toBe(out.text());
  });

  it('gives the same bytes pulled as pushed', async () => {
    const { body } = upstream();
    const relay = relayOf(body);
    const all = chunk('a') + chunk('b') + USAGE + DONE;
    body.push(Buffer.from(all.slice(0, 50)));
    body.push(Buffer.from(all.slice(50)));
    body.end();
    expect(await pulled(relay)).toBe(chunk('a') + chunk('b') + DONE);
  });

  it('stops and settles as the caller leaving when the caller cancels', async () => {
    const { body, calls } = upstream();
    const relay = relayOf(body);
    const out = sink();
    relay.pipe(out.s);
    body.push(Buffer.from(chunk('a')));
    relay.cancel();
    expect(calls).toContain('abort');
    expect(await relay.settled).toMatchObject({ clientAborted: true });
    expect(out.ended()).toBe(1);
  });

  it('ends a stream whose event never ends (past 4 MiB) as unreadable, instead of buffering it', async () => {
    for (const lineEnd of ['\n', '\r\n']) {
      const { body } = upstream();
      const relay = relayOf(body);
      const out = sink();
      relay.pipe(out.s);
      body.push(Buffer.from(chunk('a').replaceAll('\n', lineEnd)));
      const filler = Buffer.alloc(512 * 1024, 'x');
      body.push(Buffer.from('data: {"x":"'));
      for (let i = 0; i < 10 && out.ended() === 0; i++) body.push(filler);
      const outcome = await relay.settled;
      expect(outcome.error?.message).toBe('not JSON');
      expect(out.text().endsWith(DONE)).toBe(true);
      expect(out.ended()).toBe(1);
    }
  });
});
