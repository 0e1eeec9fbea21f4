import { describe, expect, it } from 'vitest';
import { ProxyError } from '../endpoints/errors.js';
import type { ChunkSource } from '../upstreams/chunk-source.js';
import type { StreamOutcome } from '../upstreams/upstream.js';
import type { Checking } from './check-text.js';
import { Findings } from './findings.js';
import { compileGuardrail } from './guardrail-set.js';
import { guardStream } from './stream-guard.js';

/**
 * The stream guard on the events each dialect streams, cut as upstreams cut them: nothing it
 * should catch reaches the caller, whatever the chunking; everything else an event carries does.
 */

const CARD = '4111 1111 1111 1111';
const JWT = `eyJhbGciOiJIUzI1NiJ9.eyJ${'a'.repeat(480)}.${'s'.repeat(20)}`;

const guardrail = (action: 'Redact' | 'Block' = 'Redact') =>
  compileGuardrail({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'Guardrail',
    metadata: { name: 'g' },
    spec: { detectors: { builtIn: {} }, action },
  });

const sourceOf = (chunks: string[]): ChunkSource => {
  let i = 0;
  const enc = new TextEncoder();
  return {
    read: async () => (i < chunks.length ? enc.encode(chunks[i++]) : undefined),
    cancel: () => {
      i = chunks.length;
    },
  };
};

/** The SSE text cut every `size` characters, as a network would. */
const cut = (text: string, size: number) =>
  Array.from({ length: Math.ceil(text.length / size) }, (_, i) => text.slice(i * size, (i + 1) * size));

async function run(
  dialect: Parameters<typeof guardStream>[0],
  sse: string,
  size = 7,
  action: 'Redact' | 'Block' = 'Redact',
): Promise<{ text: string; events: Record<string, unknown>[]; outcome: StreamOutcome; checking: Checking }> {
  const checking: Checking = { findings: new Findings() };
  const guarded = guardStream(
    dialect,
    sourceOf(cut(sse, size)),
    Promise.resolve({}),
    [guardrail(action)],
    checking,
    (c) =>
      new ProxyError(
        400,
        'invalid_request_error',
        'guardrail_blocked',
        `blocked by guardrail ${c.guardrail}: the answer carries ${c.category}`,
      ),
  );
  const body = guarded.body as ChunkSource;
  let text = '';
  const dec = new TextDecoder();
  for (let c = await body.read(); c !== undefined; c = await body.read()) text += dec.decode(c, { stream: true });
  const events = text
    .split('\n')
    .filter((l) => l.startsWith('data: ') && l !== 'data: [DONE]')
    .map((l) => JSON.parse(l.slice(6)) as Record<string, unknown>);
  return { text, events, outcome: await guarded.outcome, checking };
}

const sse = (events: unknown[], done = true) =>
  `${events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('')}${done ? 'data: [DONE]\n\n' : ''}`;

/** A chat stream of `pieces` of content (choice 0), the first chunk carrying the role. */
const chat = (pieces: string[], extra: Record<string, unknown>[] = []) =>
  sse([
    {
      id: 'c1',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }],
    },
    ...pieces.map((p) => ({
      id: 'c1',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      choices: [{ index: 0, delta: { content: p }, finish_reason: null }],
    })),
    ...extra,
    {
      id: 'c1',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      choices: [{ index: 0, delta: {}, finish_reason: 'stop' }],
    },
  ]);

const contentOf = (events: Record<string, unknown>[]) =>
  events
    .flatMap((e) => (e.choices as { index: number; delta?: { content?: string } }[] | undefined) ?? [])
    .filter((c) => c.index === 0)
    .map((c) => c.delta?.content ?? '')
    .join('');

const pieces = (text: string, size: number) => cut(text, size);

describe('the stream guard', () => {
  it('catches a token longer than the look-behind, sent four characters at a time, and keeps the role', async () => {
    const { events, text } = await run('openai-chat', chat(pieces(`token: ${JWT} ok`, 4)));
    expect(text).not.toContain('aaaaaaaaaa');
    expect(contentOf(events)).toBe('token: <API_TOKEN> ok');
    const first = events[0]?.choices as { delta: { role?: string } }[] | undefined;
    expect(first?.[0]?.delta.role).toBe('assistant');
  });

  it('catches an AWS secret whose naming words went out in an earlier release', async () => {
    const secret = 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY';
    const answer = `aws_secret_access_key = ${'x '.repeat(100)}${secret} done`;
    const { events } = await run('openai-chat', chat(pieces(answer, 3)));
    expect(contentOf(events)).not.toContain('wJalr');
    expect(contentOf(events)).toContain('<CLOUD_CREDENTIAL> done');
  });

  it('never cuts through a finding that straddles the look-behind', async () => {
    const { events } = await run(
      'openai-chat',
      chat(pieces(`${'x'.repeat(70)}4111111111111111 and more text here`, 20)),
    );
    expect(contentOf(events)).toBe(`${'x'.repeat(70)}<PAYMENT_CARD> and more text here`);
  });

  it('redacts the whole body of a private key longer than the look-behind, streamed line by line', async () => {
    const body = Array.from({ length: 20 }, (_, i) => `MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC${i}`).join(
      '\n',
    );
    const key = `-----BEGIN PRIVATE KEY-----\n${body}\n-----END PRIVATE KEY-----`;
    const { text } = await run('openai-chat', chat(pieces(`here: ${key} done`, 9)));
    expect(text).not.toContain('MIIEvQ');
    expect(text).toContain('done');
  });

  it('lets each word go as soon as the next begins, not a window later', async () => {
    const checking: Checking = { findings: new Findings() };
    const chunks = chat(['Hello', ' there,', ' friend']).split(/(?<=\n\n)/);
    let i = 0;
    const source: ChunkSource = {
      read: async () => (i < chunks.length ? new TextEncoder().encode(chunks[i++]) : undefined),
      cancel: () => {},
    };
    const guarded = guardStream('openai-chat', source, Promise.resolve({}), [guardrail()], checking, () => {
      throw new Error('no block');
    }).body as ChunkSource;
    const dec = new TextDecoder();
    let out = '';
    // The role chunk, 'Hello' (held), ' there,' (releases 'Hello '): by the third upstream chunk, the first word is out.
    while (i < 3) out += dec.decode((await guarded.read()) ?? new Uint8Array());
    expect(out).toContain('"content":"Hello "');
  });

  it("releases one choice's held text without the other choice's", async () => {
    const both = {
      id: 'c1',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      choices: [
        { index: 0, delta: { content: 'hello' }, finish_reason: null },
        { index: 1, delta: { content: `card ${CARD}` }, finish_reason: null },
      ],
    };
    const end0 = {
      id: 'c1',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      choices: [{ index: 0, delta: {}, finish_reason: 'stop' }],
    };
    const end1 = {
      id: 'c1',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      choices: [{ index: 1, delta: {}, finish_reason: 'stop' }],
    };
    const { text } = await run('openai-chat', sse([both, end0, end1]), 1000);
    expect(text).not.toContain('4111');
    expect(text.match(/hello/g)).toHaveLength(1);
  });

  it('keeps streamed tool arguments JSON, a number found outside a string quoted', async () => {
    const args = `{"card":"${CARD}","phone":4155552671}`;
    const calls = cut(args, 5).map((a, i) => ({
      id: 'c1',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      choices: [
        {
          index: 0,
          delta: {
            tool_calls: [
              {
                index: 0,
                ...(i === 0 ? { id: 'call_1', type: 'function' } : {}),
                function: { ...(i === 0 ? { name: 'pay' } : {}), arguments: a },
              },
            ],
          },
          finish_reason: null,
        },
      ],
    }));
    const { events } = await run('openai-chat', chat([], calls));
    const sent = events
      .flatMap((e) => (e.choices as { delta?: { tool_calls?: { function?: { arguments?: string } }[] } }[]) ?? [])
      .flatMap((c) => c.delta?.tool_calls ?? [])
      .map((t) => t.function?.arguments ?? '')
      .join('');
    expect(JSON.parse(sent)).toEqual({ card: '<PAYMENT_CARD>', phone: '<PHONE>' });
    expect(JSON.stringify(events)).toContain('"id":"call_1"');
  });

  it('ends a blocked stream with the error event, and its outcome says so though the relay had settled first', async () => {
    const { text, outcome } = await run('openai-chat', chat([`key ${CARD}`]), 7, 'Block');
    expect(text).not.toContain('4111');
    expect(text).toContain('"code":"guardrail_blocked"');
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(outcome.error?.code).toBe('guardrail_blocked');
  });

  it("redacts Responses' deltas and the done events that repeat the text, numbering every event", async () => {
    const item = 'msg_1';
    const text = `pay ${CARD} now`;
    const deltas = cut(text, 3).map((d) => ({
      type: 'response.output_text.delta',
      item_id: item,
      output_index: 0,
      content_index: 0,
      delta: d,
      logprobs: [{ token: d }],
      sequence_number: 0,
    }));
    const done = {
      type: 'response.output_text.done',
      item_id: item,
      output_index: 0,
      content_index: 0,
      text,
      logprobs: [],
      sequence_number: 0,
    };
    const part = {
      type: 'response.content_part.done',
      item_id: item,
      output_index: 0,
      content_index: 0,
      part: { type: 'output_text', text, annotations: [] },
      sequence_number: 0,
    };
    const completed = {
      type: 'response.completed',
      sequence_number: 0,
      response: {
        id: 'r',
        output: [{ id: item, type: 'message', content: [{ type: 'output_text', text, annotations: [] }] }],
      },
    };
    const stream = [...deltas, done, part, completed]
      .map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`)
      .join('');
    const { events, text: out } = await run('openai-responses', stream);
    expect(out).not.toContain('4111');
    expect(out).not.toContain('"token"');
    const streamed = events
      .filter((e) => e.type === 'response.output_text.delta')
      .map((e) => e.delta)
      .join('');
    expect(streamed).toBe('pay <PAYMENT_CARD> now');
    expect(events.find((e) => e.type === 'response.output_text.done')?.text).toBe('pay <PAYMENT_CARD> now');
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
  });

  it("redacts Anthropic's text and tool input deltas", async () => {
    const events = [
      { type: 'message_start', message: { id: 'm', role: 'assistant', content: [] } },
      { type: 'content_block_start', index: 0, content_block: { type: 'tool_use', id: 't', name: 'pay', input: {} } },
      ...cut(`{"card": "${CARD}"}`, 4).map((p) => ({
        type: 'content_block_delta',
        index: 0,
        delta: { type: 'input_json_delta', partial_json: p },
      })),
      { type: 'content_block_stop', index: 0 },
      { type: 'message_stop' },
    ];
    const stream = events.map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join('');
    const { events: out, text } = await run('anthropic-messages', stream);
    expect(text).not.toContain('4111');
    const json = out
      .filter((e) => e.type === 'content_block_delta')
      .map((e) => (e.delta as { partial_json: string }).partial_json)
      .join('');
    expect(JSON.parse(json)).toEqual({ card: '<PAYMENT_CARD>' });
    expect(text.indexOf('content_block_stop')).toBeGreaterThan(text.lastIndexOf('input_json_delta'));
  });
});
