import { createHash, timingSafeEqual } from 'node:crypto';
import { ProxyError } from './errors.js';

/**
 * API keys, held only as SHA-256 digests. A presented key is hashed and compared against
 * every stored digest with a constant-time comparison (no early exit), so neither the
 * comparison nor the number of keys checked reveals how close a guess came.
 */

export const sha256 = (text: string): Buffer => createHash('sha256').update(text, 'utf8').digest();

export interface Caller {
  /** First 12 hex characters of the key's SHA-256: enough to tell keys apart in reports. */
  keyHashPrefix: string;
}

export class ApiKeys {
  private digests: Buffer[];

  constructor(digests: Buffer[] = []) {
    this.digests = digests;
  }

  /** Keys given in clear text are hashed at once; the text is not kept. */
  static fromKeys(keys: string[]): ApiKeys {
    return new ApiKeys(keys.map(sha256));
  }

  /**
   * Lines of a keys file or Secret value: `sha256:<64 hex>` for a digest, anything else is a
   * key in clear text; blank lines and `#` comments are skipped.
   */
  static parse(text: string): ApiKeys {
    const digests: Buffer[] = [];
    for (const raw of text.split('\n')) {
      const line = raw.trim();
      if (!line || line.startsWith('#')) continue;
      const m = /^sha256:([0-9a-f]{64})$/i.exec(line);
      digests.push(m?.[1] ? Buffer.from(m[1], 'hex') : sha256(line));
    }
    return new ApiKeys(digests);
  }

  /** Swaps the key set (a Secret update) without disturbing requests in flight. */
  replace(next: ApiKeys): void {
    this.digests = next.digests;
  }

  get size(): number {
    return this.digests.length;
  }

  verify(key: string): Caller | undefined {
    const digest = sha256(key);
    let match = false;
    for (const d of this.digests) match = timingSafeEqual(d, digest) || match;
    return match ? { keyHashPrefix: digest.toString('hex').slice(0, 12) } : undefined;
  }
}

/** The key from `X-API-Key` (in-cluster) or `Authorization: Bearer` (gateway). */
export function presentedKey(headers: {
  apiKey?: string | undefined;
  authorization?: string | undefined;
}): string | undefined {
  if (headers.apiKey?.trim()) return headers.apiKey.trim();
  const m = /^Bearer\s+(\S+)\s*$/i.exec(headers.authorization ?? '');
  return m?.[1];
}

export function authenticate(
  keys: ApiKeys,
  headers: { apiKey?: string | undefined; authorization?: string | undefined },
): Caller | ProxyError {
  const key = presentedKey(headers);
  if (!key) {
    return new ProxyError(
      401,
      'authentication_error',
      'missing_api_key',
      'no API key: send it as "X-API-Key: <key>" or "Authorization: Bearer <key>"',
    );
  }
  return (
    keys.verify(key) ??
    new ProxyError(401, 'authentication_error', 'invalid_api_key', 'the API key is not valid for this gateway')
  );
}
