import { randomBytes } from 'node:crypto';

/**
 * Request ids, unique without a syscall per request: a random per-process prefix and a counter.
 * Every answer carries its request's in x-request-id; logs and usage records name it.
 */
const idPrefix = `req_${randomBytes(8).toString('hex')}`;
let idCounter = 0;

export const newRequestId = (): string => `${idPrefix}${(idCounter++).toString(16).padStart(8, '0').slice(-8)}`;
