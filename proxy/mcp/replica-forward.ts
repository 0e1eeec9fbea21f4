import type { IncomingMessage, ServerResponse } from 'node:http';
import { Agent, request } from 'undici';

/**
 * What only the replica serving a call can take up (a call's answer stream, a 2026-07-28 call
 * waiting for input) seals that replica's own address (the pod's, where its peers reach it); a
 * client's GET or retry that another replica receives is passed to it as it came, and its answer
 * back as it comes. The address is the gateway's own sealing: a client cannot name one. A request
 * passed on once is never passed again.
 */

/** Marks a request another replica passed on: served here or refused, never passed again. */
const FORWARDED = 'x-pao-replica-forwarded';

/** Headers of the connection, not of the request (RFC 9110 §7.6.1), and the peer's own. */
const NOT_FORWARDED = new Set([
  'connection',
  'keep-alive',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'host',
  'proxy-connection',
  // The body is whole already (and undici refuses it).
  'expect',
  'content-length',
]);

/** A peer that is gone refuses at once; one that does not answer the connection is waited for briefly. */
const peers = new Agent({ connect: { timeout: 2_000 }, headersTimeout: 0, bodyTimeout: 0 });

/** Whether this request came from another replica. */
export const wasForwarded = (req: IncomingMessage): boolean => req.headers[FORWARDED] !== undefined;

/**
 * The request passed to the replica at `replica` (its base URL), the answer written back as it
 * comes. False when that replica cannot be reached (gone): the caller answers as for a call no
 * replica holds.
 */
export async function forwardToReplica(
  replica: string,
  req: IncomingMessage,
  res: ServerResponse,
  body: string | undefined,
): Promise<boolean> {
  const headers: Record<string, string> = { [FORWARDED]: '1' };
  // Headers the Connection header names are the connection's too.
  const named = new Set(
    String(req.headers.connection ?? '')
      .toLowerCase()
      .split(/\s*,\s*/),
  );
  for (const [name, value] of Object.entries(req.headers)) {
    if (!NOT_FORWARDED.has(name) && !named.has(name) && typeof value === 'string') headers[name] = value;
  }
  if (body !== undefined) headers['content-length'] = String(Buffer.byteLength(body));
  const abort = new AbortController();
  res.once('close', () => abort.abort());
  let answer: Awaited<ReturnType<typeof request>>;
  try {
    answer = await request(new URL(req.url ?? '/', replica), {
      method: req.method === 'POST' ? 'POST' : 'GET',
      headers,
      ...(body !== undefined ? { body } : {}),
      signal: abort.signal,
      dispatcher: peers,
    });
  } catch {
    return false;
  }
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(answer.headers)) {
    if (!NOT_FORWARDED.has(name) && value !== undefined) out[name] = value;
  }
  res.writeHead(answer.statusCode, out);
  try {
    for await (const chunk of answer.body) res.write(chunk);
  } catch {
    // The peer's answer broke off (or the client went away): the client must see it broken, not ended.
    res.destroy();
    return true;
  }
  res.end();
  return true;
}
