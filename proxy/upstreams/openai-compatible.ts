import type { ReadableStreamReadResult } from 'node:stream/web';
import { createParser } from 'eventsource-parser';
import { ProxyError } from '../errors.js';
import type { ChatCall, ChatResult, StreamOutcome, Timeouts, Upstream, Usage } from '../upstream.js';
import { DEFAULT_TIMEOUTS } from '../upstream.js';

/**
 * OpenAI-compatible upstreams (Ollama's /v1): the request passes through as it came (the
 * gateway's own fields removed), streams are relayed event by event with backpressure, and
 * usage is taken from the upstream's own counts. For streams the gateway always asks for the
 * usage chunk and drops it again when the client did not ask for it.
 */

const encoder = new TextEncoder();
const frame = (data: string) => `data: ${data}\n\n`;
const DONE = frame('[DONE]');

function usageOf(body: unknown): Usage | undefined {
  const u = (body as { usage?: { prompt_tokens?: unknown; completion_tokens?: unknown } } | null)?.usage;
  if (!u || typeof u.prompt_tokens !== 'number' || typeof u.completion_tokens !== 'number') return undefined;
  return { promptTokens: u.prompt_tokens, completionTokens: u.completion_tokens };
}

function upstreamName(call: ChatCall): string {
  return `the model server of ${call.route.model} (${call.route.provider})`;
}

/** A fetch failure as the caller should see it: unreachable (502) or too slow (504). */
function transportError(err: unknown, call: ChatCall, timedOut: boolean): ProxyError {
  if (timedOut) {
    return new ProxyError(504, 'timeout_error', 'upstream_timeout', `${upstreamName(call)} did not answer in time`);
  }
  const cause = (err as { cause?: { code?: string } })?.cause?.code ?? (err as { code?: string })?.code;
  return new ProxyError(
    502,
    'api_error',
    'upstream_unreachable',
    `could not reach ${upstreamName(call)}${cause ? ` (${cause})` : ''}`,
  );
}

/** An upstream error status mapped to what the client gets; 429 and 504 pass through. */
async function statusError(res: Response, call: ChatCall): Promise<ProxyError> {
  let detail = '';
  try {
    const text = await res.text();
    const parsed = JSON.parse(text) as { error?: { message?: string } | string };
    detail = typeof parsed.error === 'string' ? parsed.error : (parsed.error?.message ?? '');
  } catch {
    // not JSON: the status says enough
  }
  const what = `${upstreamName(call)} answered ${res.status}${detail ? `: ${detail.slice(0, 300)}` : ''}`;
  if (res.status === 429) {
    const retry = res.headers.get('retry-after');
    return new ProxyError(
      429,
      'rate_limit_error',
      'upstream_rate_limited',
      what,
      null,
      retry ? { 'Retry-After': retry } : {},
    );
  }
  if (res.status === 400 || res.status === 422)
    return new ProxyError(400, 'invalid_request_error', 'upstream_rejected', what);
  if (res.status === 504 || res.status === 408) return new ProxyError(504, 'timeout_error', 'upstream_timeout', what);
  return new ProxyError(502, 'api_error', 'upstream_error', what);
}

export class OpenAICompatibleUpstream implements Upstream {
  constructor(
    private readonly timeouts: Timeouts = DEFAULT_TIMEOUTS,
    /** Maps a route's base URL to where to connect (tests stand a double behind a Service name). */
    private readonly resolve: (baseUrl: string) => string = (u) => u,
  ) {}

  async chat(call: ChatCall): Promise<ChatResult> {
    const started = performance.now();
    const upstreamAbort = new AbortController();
    const onClientAbort = () => upstreamAbort.abort();
    call.signal.addEventListener('abort', onClientAbort, { once: true });
    const body = call.stream
      ? {
          ...call.body,
          stream_options: { ...((call.body.stream_options as object | undefined) ?? {}), include_usage: true },
        }
      : call.body;

    let timedOut = false;
    const limit = call.stream ? this.timeouts.streamHeadersMs : this.timeouts.responseMs;
    const timer = setTimeout(() => {
      timedOut = true;
      upstreamAbort.abort();
    }, limit);
    let res: Response;
    try {
      res = await fetch(`${this.resolve(call.route.baseUrl)}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: call.stream ? 'text/event-stream' : 'application/json' },
        body: JSON.stringify(body),
        signal: upstreamAbort.signal,
      });
    } catch (err) {
      clearTimeout(timer);
      call.signal.removeEventListener('abort', onClientAbort);
      throw transportError(err, call, timedOut);
    }

    if (!res.ok) {
      clearTimeout(timer);
      call.signal.removeEventListener('abort', onClientAbort);
      throw await statusError(res, call);
    }

    if (!call.stream) {
      try {
        const json = (await res.json()) as unknown;
        const usage = usageOf(json);
        return usage ? { kind: 'json', status: 200, body: json, usage } : { kind: 'json', status: 200, body: json };
      } catch (err) {
        if (timedOut || call.signal.aborted) throw transportError(err, call, timedOut);
        throw new ProxyError(502, 'api_error', 'upstream_error', `${upstreamName(call)} sent a body that is not JSON`);
      } finally {
        clearTimeout(timer);
        call.signal.removeEventListener('abort', onClientAbort);
      }
    }
    clearTimeout(timer);
    return this.relay(res, call, upstreamAbort, started, onClientAbort);
  }

  private relay(
    res: Response,
    call: ChatCall,
    upstreamAbort: AbortController,
    started: number,
    onClientAbort: () => void,
  ): ChatResult {
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    const out: string[] = [];
    const outcome: StreamOutcome = {};
    let sawDone = false;
    let finished = false;
    let settle: (o: StreamOutcome) => void = () => {};
    const settled = new Promise<StreamOutcome>((r) => {
      settle = r;
    });
    const finish = (error?: ProxyError) => {
      if (finished) return;
      finished = true;
      if (error) {
        outcome.error = error;
        // The stream already began: the error travels as an event, then the stream ends properly.
        out.push(frame(JSON.stringify(error.toJSON())));
      }
      out.push(DONE);
      call.signal.removeEventListener('abort', onClientAbort);
    };

    const parser = createParser({
      onEvent: (event) => {
        if (finished) return;
        const data = event.data;
        if (data === '[DONE]') {
          sawDone = true;
          finish();
          return;
        }
        let chunk: { choices?: Array<{ delta?: { content?: string } }>; usage?: unknown };
        try {
          chunk = JSON.parse(data) as typeof chunk;
        } catch {
          finish(
            new ProxyError(502, 'api_error', 'upstream_error', `${upstreamName(call)} sent an event that is not JSON`),
          );
          return;
        }
        const usage = usageOf(chunk);
        if (usage) outcome.usage = usage;
        if (outcome.firstTokenMs === undefined && chunk.choices?.some((c) => c.delta?.content)) {
          outcome.firstTokenMs = performance.now() - started;
        }
        if (usage && !call.clientWantsUsage) {
          // The usage-only chunk exists because the gateway asked for it; the client did not.
          if (!chunk.choices || chunk.choices.length === 0) return;
          delete chunk.usage;
          out.push(frame(JSON.stringify(chunk)));
          return;
        }
        out.push(frame(data));
      },
    });

    const idleMs = this.timeouts.idleMs;
    const read = async (): Promise<ReadableStreamReadResult<Uint8Array> | 'idle'> => {
      let timer: NodeJS.Timeout | undefined;
      const idle = new Promise<'idle'>((resolve) => {
        timer = setTimeout(() => resolve('idle'), idleMs);
      });
      try {
        return await Promise.race([reader.read(), idle]);
      } finally {
        clearTimeout(timer);
      }
    };

    const body = new ReadableStream<Uint8Array>({
      pull: async (controller) => {
        // Read from the upstream only when the client is ready for more: backpressure end to end.
        while (out.length === 0 && !finished) {
          let r: ReadableStreamReadResult<Uint8Array> | 'idle';
          try {
            r = await read();
          } catch (err) {
            finish(
              new ProxyError(
                502,
                'api_error',
                'upstream_stream_broken',
                `${upstreamName(call)} broke off the stream: ${transportError(err, call, false).message}`,
              ),
            );
            break;
          }
          if (r === 'idle') {
            upstreamAbort.abort();
            finish(
              new ProxyError(
                504,
                'timeout_error',
                'upstream_idle_timeout',
                `${upstreamName(call)} sent nothing for ${idleMs} ms`,
              ),
            );
            break;
          }
          if (r.done) {
            parser.feed(decoder.decode());
            if (!sawDone) {
              finish(
                new ProxyError(
                  502,
                  'api_error',
                  'upstream_stream_broken',
                  `${upstreamName(call)} ended the stream early`,
                ),
              );
            }
            break;
          }
          parser.feed(decoder.decode(r.value, { stream: true }));
        }
        if (out.length > 0) controller.enqueue(encoder.encode(out.splice(0).join('')));
        if (finished) {
          controller.close();
          reader.cancel().catch(() => {});
          settle(outcome);
        }
      },
      cancel: () => {
        // The client went away: stop generating upstream.
        outcome.clientAborted = true;
        finished = true;
        upstreamAbort.abort();
        call.signal.removeEventListener('abort', onClientAbort);
        settle(outcome);
      },
    });
    return { kind: 'stream', body, outcome: settled };
  }
}
