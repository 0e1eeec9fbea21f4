import { connect } from 'node:net';

/**
 * HTTP/1.1 by hand over a plain socket, for tests that must send what no well-behaved client
 * library lets through (any bytes in a header value, a body that never ends, an upload that
 * breaks off) and see exactly what the server answers. One request per connection.
 */

export interface RawRequest {
  method?: string;
  path: string;
  /** Values go out as their latin1 bytes, unchecked. */
  headers: ReadonlyArray<readonly [string, string]>;
  /**
   * The body: whole (with Content-Length unless the headers set it), or in chunks with
   * Transfer-Encoding: chunked. `end: false` never sends the body's end: the request stays open
   * until the server answers (or `timeoutMs` passes).
   */
  body?: string | Uint8Array;
  chunked?: { chunks: Iterable<Uint8Array>; end: boolean };
  /** Stop after this many bytes of a whole body (after the chunks sent, chunked) and reset the connection: a client that went away. */
  breakAfter?: number;
  timeoutMs?: number;
}

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export function rawRequest(base: string, req: RawRequest): Promise<RawResponse | 'closed'> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(url.port), url.hostname);
    const received: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer to ${req.method ?? 'POST'} ${req.path} in ${req.timeoutMs ?? 10_000} ms`));
    }, req.timeoutMs ?? 10_000);
    socket.on('data', (d: Buffer) => received.push(d));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      const all = Buffer.concat(received);
      resolve(all.length === 0 ? 'closed' : parse(all));
    });
    socket.on('connect', () => {
      const body = typeof req.body === 'string' ? Buffer.from(req.body, 'utf8') : req.body;
      const lines = [`${req.method ?? 'POST'} ${req.path} HTTP/1.1`, `host: ${url.host}`, 'connection: close'];
      for (const [name, value] of req.headers) lines.push(`${name}: ${value}`);
      const named = (n: string) => req.headers.some(([h]) => h.toLowerCase() === n);
      if (req.chunked) lines.push('transfer-encoding: chunked');
      else if (body && !named('content-length')) lines.push(`content-length: ${body.length}`);
      socket.write(Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'));
      if (body) writeBody(socket, body, req.breakAfter);
      if (req.chunked) {
        for (const chunk of req.chunked.chunks) {
          // A chunk of size 0 is the body's end: only `end` sends it.
          if (chunk.length === 0) continue;
          socket.write(`${chunk.length.toString(16)}\r\n`);
          socket.write(chunk);
          socket.write('\r\n');
        }
        if (req.chunked.end) socket.write('0\r\n\r\n');
        else if (req.breakAfter !== undefined) socket.write('', () => socket.resetAndDestroy());
      }
    });
  });
}

function writeBody(socket: ReturnType<typeof connect>, body: Uint8Array, breakAfter: number | undefined): void {
  if (breakAfter === undefined) {
    socket.write(body);
    return;
  }
  socket.write(body.subarray(0, breakAfter), () => socket.resetAndDestroy());
}

function parse(all: Buffer): RawResponse {
  const head = all.indexOf('\r\n\r\n');
  const [statusLine = '', ...headerLines] = all
    .subarray(0, head < 0 ? all.length : head)
    .toString('latin1')
    .split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of headerLines) {
    const colon = line.indexOf(':');
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  let body = head < 0 ? Buffer.alloc(0) : all.subarray(head + 4);
  if (headers['transfer-encoding'] === 'chunked') body = unchunk(body);
  return { status: Number(statusLine.split(' ')[1]), headers, body: body.toString('utf8') };
}

function unchunk(body: Buffer): Buffer {
  const out: Buffer[] = [];
  let at = 0;
  for (;;) {
    const eol = body.indexOf('\r\n', at);
    if (eol < 0) break;
    const size = Number.parseInt(body.subarray(at, eol).toString('latin1'), 16);
    if (!size) break;
    out.push(body.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
  return Buffer.concat(out);
}
