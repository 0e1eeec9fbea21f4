import type { Context, Env } from 'hono';

/** The caller's address of a request the Node server handed in (@hono/node-server's `incoming`), as audit records show it. */
export const remoteOf = <E extends Env>(c: Context<E>): string | undefined =>
  (c.env as { incoming?: { socket?: { remoteAddress?: string } } } | undefined)?.incoming?.socket?.remoteAddress;
