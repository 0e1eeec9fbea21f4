import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { CallStreams, RESUME_MS } from './call-stream.js';
import { SessionSealer } from './session.js';

/** Just what a call stream uses of a response: what was written, and its close. */
class FakeResponse extends EventEmitter {
  written = '';
  destroyed = false;
  writableFinished = false;
  writeHead() {
    return this;
  }
  write(chunk: string) {
    this.written += chunk;
    return true;
  }
  end(chunk?: string) {
    if (chunk) this.written += chunk;
    this.writableFinished = true;
    this.emit('close');
    return this;
  }
  destroy() {
    this.destroyed = true;
    this.emit('close');
    return this;
  }
}
const fake = () => new FakeResponse() as FakeResponse & ServerResponse;
const ids = (text: string) => [...text.matchAll(/^id: (.*)$/gm)].map((m) => m[1] ?? '');

afterEach(() => {
  vi.useRealTimers();
});

describe('a call’s answer stream that outlives its connection', () => {
  const streams = new CallStreams(new SessionSealer(() => 'secret'));

  it('writes what came after the client’s last event, then the rest, to the connection it came back on', () => {
    const first = fake();
    const stream = streams.open(first, 'session-a', 7, 'key-a');
    stream?.write('{"n":1}');
    stream?.write('{"n":2}');
    const [one = ''] = ids(first.written);
    first.destroy();
    stream?.write('{"n":3}');
    // Another session's GET does not take it up.
    expect(streams.resume(one, 'session-b', fake(), {})).toBe(false);
    const back = fake();
    expect(streams.resume(one, 'session-a', back, {})).toBe(true);
    stream?.write('{"answer":true}');
    stream?.end();
    expect(back.written.match(/data: (.*)/g)).toEqual(['data: {"n":2}', 'data: {"n":3}', 'data: {"answer":true}']);
    expect(back.writableFinished).toBe(true);
    // An event this replica does not know of answers the call with an error, under its id.
    const lost = fake();
    expect(streams.resume(`${one.split('.')[0]}.99`, 'session-a', lost, {})).toBe(true);
    expect(lost.written).toMatch(
      /"id":7,"error":\{"code":-32000,"message":"The answer stream of this call cannot be resumed/,
    );
  });

  it('keeps at most 64 streams of one key: past that a stream carries no ids, and another key’s still does', () => {
    const many = new CallStreams(new SessionSealer(() => 'secret'));
    const opened = Array.from({ length: 65 }, (_, i) => many.open(fake(), 'session-k', i, 'key-k'));
    expect(opened.filter((s) => s !== undefined)).toHaveLength(64);
    expect(many.open(fake(), 'session-l', 1, 'key-l')).toBeDefined();
  });

  it('cancels the call when its client does not come back in time, and forgets the stream', async () => {
    vi.useFakeTimers();
    const res = fake();
    const stream = streams.open(res, 'session-c', 'call-1', 'key-a');
    let cancelled = 0;
    stream?.onAbandon(() => cancelled++);
    stream?.write('{"n":1}');
    const before = streams.size;
    res.destroy();
    await vi.advanceTimersByTimeAsync(RESUME_MS - 1);
    expect(cancelled).toBe(0);
    await vi.advanceTimersByTimeAsync(2);
    expect(cancelled).toBe(1);
    expect(streams.size).toBe(before - 1);
  });
});
