/**
 * GET of an OpenID provider's JSON document (discovery, JWKS): bounded in time and size, since a
 * slow or huge answer must not hold the request that waits on it, and redirects are not followed
 * (a trusted issuer's documents are where it says they are).
 */

const TIMEOUT_MS = 5_000;
const MAX_BYTES = 1 << 20;

export async function getJson(url: string): Promise<unknown> {
  const res = await fetch(url, {
    headers: { accept: 'application/json' },
    redirect: 'error',
    signal: AbortSignal.timeout(TIMEOUT_MS),
  });
  if (!res.ok) {
    await res.body?.cancel();
    throw new Error(`GET ${new URL(url).origin}${new URL(url).pathname} answered ${res.status}`);
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body ?? []) {
    size += chunk.byteLength;
    if (size > MAX_BYTES) throw new Error(`${new URL(url).pathname} is larger than ${MAX_BYTES} bytes`);
    chunks.push(chunk);
  }
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

/** An OpenID provider's discovery document (OpenID Connect Discovery 1.0, section 4). */
export const discoveryUrl = (issuer: string): string => `${issuer.replace(/\/$/, '')}/.well-known/openid-configuration`;
