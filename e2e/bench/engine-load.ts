import { Agent, request } from 'undici';

/**
 * Streamed chat requests against a gateway, timed: time to the first token (the first event with
 * content) and to the end, and the tokens the answer reported (the usage chunk). Shared by the
 * engine benches (engines.ts).
 */

export interface Timed {
  ttftMs: number;
  totalMs: number;
  completionTokens: number;
  status: number;
}

const agent = new Agent({ connections: 256, headersTimeout: 600_000, bodyTimeout: 600_000 });

export async function streamOnce(base: string, key: string, body: Record<string, unknown>): Promise<Timed> {
  const started = performance.now();
  const res = await request(`${base}/openai/v1/chat/completions`, {
    method: 'POST',
    dispatcher: agent,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, 'x-tags': 'bench:engines' },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
  });
  let ttftMs = 0;
  let completionTokens = 0;
  let buffered = '';
  for await (const chunk of res.body) {
    buffered += (chunk as Buffer).toString();
    let end = buffered.indexOf('\n\n');
    while (end !== -1) {
      const event = buffered.slice(0, end);
      buffered = buffered.slice(end + 2);
      end = buffered.indexOf('\n\n');
      const data = event.startsWith('data: ') ? event.slice(6) : '';
      if (!data || data === '[DONE]') continue;
      const parsed = JSON.parse(data) as {
        choices?: Array<{ delta?: { content?: string } }>;
        usage?: { completion_tokens?: number };
      };
      if (!ttftMs && parsed.choices?.some((c) => c.delta?.content)) ttftMs = performance.now() - started;
      if (parsed.usage?.completion_tokens) completionTokens = parsed.usage.completion_tokens;
    }
  }
  const totalMs = performance.now() - started;
  return { ttftMs: ttftMs || totalMs, totalMs, completionTokens, status: res.statusCode };
}

/** `callers` loops, each sending the bodies `next(caller, i)` gives until it returns undefined. */
export async function drive(
  callers: number,
  next: (caller: number, i: number) => Record<string, unknown> | undefined,
  send: (body: Record<string, unknown>) => Promise<Timed>,
): Promise<{ results: Timed[]; seconds: number }> {
  const results: Timed[] = [];
  const started = performance.now();
  await Promise.all(
    Array.from({ length: callers }, async (_, caller) => {
      for (let i = 0; ; i++) {
        const body = next(caller, i);
        if (!body) return;
        results.push(await send(body));
      }
    }),
  );
  return { results, seconds: (performance.now() - started) / 1000 };
}

export function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] as number;
}

/** A row of the tables: TTFT p50/p99 (ms), output tokens per second, requests, failures. */
export function summarize(label: string, run: { results: Timed[]; seconds: number }): Record<string, string | number> {
  const ok = run.results.filter((r) => r.status === 200);
  const tokens = ok.reduce((n, r) => n + r.completionTokens, 0);
  return {
    run: label,
    requests: run.results.length,
    failed: run.results.length - ok.length,
    'ttft p50 ms': Math.round(
      percentile(
        ok.map((r) => r.ttftMs),
        50,
      ),
    ),
    'ttft p99 ms': Math.round(
      percentile(
        ok.map((r) => r.ttftMs),
        99,
      ),
    ),
    'output tok/s': Math.round((tokens / run.seconds) * 10) / 10,
    'req/s': Math.round((ok.length / run.seconds) * 100) / 100,
    statuses: [...new Set(run.results.map((r) => r.status))].join(','),
  };
}
