import type { IncomingMessage } from 'node:http';
import { ProxyError } from '../endpoints/errors.js';

/**
 * How the front door reads a request: its headers by name, and its body by 'data' events (an
 * async iterator per request showed in the profile), refused with 413 from Content-Length before
 * reading, or at the first chunk past the limit, and with 408 when it trickles in slower than
 * the upload time.
 */

export const headerOf =
  (req: IncomingMessage) =>
  (name: string): string | undefined => {
    const v = req.headers[name];
    return Array.isArray(v) ? v.join(', ') : v;
  };

/**
 * The request body by 'data' events (an async iterator per request showed in the profile),
 * refused with 413 from Content-Length before reading, or at the first chunk past the limit.
 */
export function readBody(
  req: IncomingMessage,
  limit: number,
  timeoutMs: number,
  grow?: (size: number) => void,
): Promise<string> {
  const declared = declaredTooLarge(req.headers['content-length'], limit);
  if (declared) return Promise.reject(declared);
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let size = 0;
    // A caller that trickles its body holds a connection and memory: it gets the upload time, not more.
    const timer = setTimeout(() => {
      req.pause();
      fail(uploadTimeout(timeoutMs));
    }, timeoutMs);
    const fail = (err: Error) => {
      clearTimeout(timer);
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('aborted', onAborted);
      reject(err);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        // Stop reading; the rest is discarded when the response ends.
        req.pause();
        fail(tooLarge(limit));
        return;
      }
      if (grow) {
        try {
          grow(size);
        } catch (err) {
          req.pause();
          fail(err as Error);
          return;
        }
      }
      parts.push(chunk);
    };
    const onEnd = () => {
      clearTimeout(timer);
      req.off('error', onError);
      req.off('aborted', onAborted);
      resolve(parts.length === 1 ? (parts[0] as Buffer).toString('utf8') : Buffer.concat(parts, size).toString('utf8'));
    };
    const onError = () => fail(unreadable());
    const onAborted = () => fail(unreadable());
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('error', onError);
    req.once('aborted', onAborted);
  });
}

const uploadTimeout = (ms: number) =>
  new ProxyError(
    408,
    'invalid_request_error',
    'request_timeout',
    `the request body did not arrive within ${ms / 1000} s; send it at once`,
    null,
    { connection: 'close' },
  );

const tooLarge = (limit: number) =>
  new ProxyError(413, 'invalid_request_error', 'request_too_large', `the request body is larger than ${limit} bytes`);

const unreadable = () =>
  new ProxyError(
    400,
    'invalid_request_error',
    'body_unreadable',
    'the request body could not be read to its end (the connection broke off)',
  );

/** Content-Length over the limit: refused before a byte of the body is read. */
function declaredTooLarge(contentLength: string | undefined, limit: number): ProxyError | undefined {
  if (contentLength === undefined) return undefined;
  const n = Number(contentLength);
  return Number.isFinite(n) && n > limit ? tooLarge(limit) : undefined;
}
