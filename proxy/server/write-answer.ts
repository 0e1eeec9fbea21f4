import type { ServerResponse } from 'node:http';
import type { Answer } from '../exchange.js';
import { type ChunkSource, chunksOf } from '../upstreams/chunk-source.js';

/**
 * How the front door writes an answer: a whole one with its length (no chunked framing: what
 * OpenAI and Ollama send), a stream chunk by chunk with backpressure, straight to the socket in
 * push mode where the source has it. A caller that leaves cancels the stream, which stops the
 * upstream and settles the request's usage.
 */

/** Calls `resume` once the socket drained, or closed: a caller that left never drains. */
function onceDrained(res: ServerResponse, resume: () => void): void {
  const go = () => {
    res.off('drain', go);
    res.off('close', go);
    resume();
  };
  res.on('drain', go);
  res.on('close', go);
}

export async function writeAnswer(out: Answer, res: ServerResponse, signal: AbortSignal): Promise<void> {
  if (out.kind === 'json') {
    // With the length known, no chunked framing: what OpenAI and Ollama send for whole answers.
    res.writeHead(out.status, { ...out.headers, 'content-length': Buffer.byteLength(out.body) }).end(out.body);
    return;
  }
  res.writeHead(out.status, out.headers);
  if (!(out.body instanceof ReadableStream) && out.body.pipe) return pipeOutput(out.body, res, signal);
  const source = chunksOf(out.body);
  // The caller left: cancelling the body stops the upstream and settles the usage record.
  const cancel = () => source.cancel();
  if (signal.aborted) return cancel();
  signal.addEventListener('abort', cancel, { once: true });
  try {
    for (;;) {
      const value = await source.read();
      if (value === undefined) break;
      // Backpressure: read the next chunk only once the socket took this one.
      if (!res.write(value)) {
        await new Promise<void>((resolve) => onceDrained(res, resolve));
        if (signal.aborted) return;
      }
    }
    res.end();
  } finally {
    signal.removeEventListener('abort', cancel);
  }
}

/**
 * A source in push mode writes straight to the socket: no promise per chunk. Resolves once the
 * stream ended or the caller left (the source is cancelled then, which settles its usage).
 */
function pipeOutput(source: ChunkSource, res: ServerResponse, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    const cancel = () => {
      source.cancel();
      resolve();
    };
    if (signal.aborted) return cancel();
    signal.addEventListener('abort', cancel, { once: true });
    source.pipe?.({
      write: (chunk) => res.write(chunk),
      onceDrained: (resume) => onceDrained(res, resume),
      end: () => {
        signal.removeEventListener('abort', cancel);
        if (!res.writableEnded) res.end();
        resolve();
      },
    });
  });
}
