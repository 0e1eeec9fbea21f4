import type { Dispatcher } from 'undici';
import { describe, expect, it } from 'vitest';
import { DIALECTS } from '../endpoints/dialects.js';
import { ProxyError } from '../endpoints/errors.js';
import type { ChunkSink } from './chunk-source.js';
import { StreamedBody } from './dispatch.js';
import { PASS_THROUGH } from './openai-compatible-dialects.js';
import { SseRelay } from './sse-relay.js';

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

function relayOf(body: StreamedBody, clientWantsUsage = false) {
  const spec = DIALECTS['openai-chat'];
  return new SseRelay(
    body,
    {
      reader: PASS_THROUGH['openai-chat'].reader(clientWantsUsage),
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
