import { describe, expect, it } from 'vitest';
import type { ChunkSource } from '../upstreams/chunk-source.js';
import { type Stamp, stampEvents, tapStream } from './answer.js';

const stamp: Stamp = { id: 'resp_gateway', previousResponseId: 'resp_before', store: true, background: false };
const bytes = (s: string) => new TextEncoder().encode(s);
const event = (name: string, data: object) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;

function source(chunks: Uint8Array[]): ChunkSource {
  return { read: async () => chunks.shift(), cancel: () => {} };
}

async function drain(out: ChunkSource): Promise<Uint8Array[]> {
  const got: Uint8Array[] = [];
  for (let c = await out.read(); c !== undefined; c = await out.read()) got.push(c);
  return got;
}

describe('a stored response streamed', () => {
  const created = event('response.created', {
    type: 'response.created',
    response: { id: 'up_1', status: 'in_progress' },
  });
  const delta = event('response.output_text.delta', { type: 'response.output_text.delta', delta: 'Hi' });
  const completed = event('response.completed', {
    type: 'response.completed',
    response: { id: 'up_1', status: 'completed', output: [] },
  });

  it('passes the deltas as the chunks they came in, and rewrites and saves the Responses', async () => {
    const deltaChunk = bytes(delta + delta);
    const saved: unknown[] = [];
    let savedBeforeEnd = false;
    const out = tapStream(
      source([bytes(created), deltaChunk, bytes(completed)]),
      stampEvents(stamp, async (r) => {
        saved.push(r);
      }),
    );
    const got = await drain({
      read: async () => {
        const c = await out.read();
        if (c && new TextDecoder().decode(c).includes('response.completed')) savedBeforeEnd = saved.length === 1;
        return c;
      },
      cancel: () => {},
    });
    expect(got[1]).toBe(deltaChunk);
    const text = got.map((c) => new TextDecoder().decode(c)).join('');
    expect(text).not.toContain('up_1');
    expect(text.match(/"id":"resp_gateway"/g)).toHaveLength(2);
    expect(savedBeforeEnd).toBe(true);
    expect(saved[0]).toMatchObject({ id: 'resp_gateway', previous_response_id: 'resp_before', status: 'completed' });
  });

  it('reads an event cut across chunks whole, and a delta after it goes as it came again', async () => {
    const cut = created.length - 10;
    const deltaChunk = bytes(delta);
    const text = (
      await drain(
        tapStream(
          source([bytes(created.slice(0, cut)), bytes(created.slice(cut)), deltaChunk]),
          stampEvents(stamp, async () => {}),
        ),
      )
    )
      .map((c) => new TextDecoder().decode(c))
      .join('');
    expect(text).toBe(
      event('response.created', {
        type: 'response.created',
        response: {
          id: 'resp_gateway',
          status: 'in_progress',
          previous_response_id: 'resp_before',
          store: true,
          background: false,
        },
      }) + delta,
    );
  });
});
