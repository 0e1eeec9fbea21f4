/**
 * DNS rebinding protection, as MCP's transport spec asks of every server: "Servers MUST validate
 * the Origin header on all incoming connections", and answer an invalid one with 403. A web page
 * whose name an attacker rebinds to the gateway's address sends its own Origin (and Host): both
 * are checked before anything else, the key included.
 *
 * - `Origin`: absent (server-side clients, SDKs, agents: they send none) passes; present, it must
 *   be one of the allowed origins (`scheme://host[:port]`, the port may be `*`; `*` alone allows
 *   any). None are allowed by default, except the loopback ones on a loopback bind (a developer's
 *   browser tool next to `npm start`).
 * - `Host`: checked only where the gateway listens on loopback (a laptop, where rebinding is the
 *   threat): localhost, 127.0.0.1 or [::1] on any port, or an allowed host. In a cluster the Host
 *   is whatever name routes to the Service, and a browser page cannot reach it by rebinding.
 */

export interface OriginPolicy {
  /** Origins a browser page may call from; empty: none. */
  allowedOrigins: readonly string[];
  /** Hosts the Host header may name; undefined: not checked (a bind that is not loopback). */
  allowedHosts?: readonly string[];
}

const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]'];
const LOOPBACK_BINDS = new Set(['127.0.0.1', 'localhost', '::1', '[::1]']);

/** The policy for a bind address and the configured lists (comma-separated flags, already split). */
export function originPolicy(bind: string, origins: readonly string[], hosts: readonly string[]): OriginPolicy {
  const loopback = LOOPBACK_BINDS.has(bind) || bind.startsWith('127.');
  return {
    allowedOrigins: loopback
      ? [...origins, ...LOOPBACK_NAMES.flatMap((h) => [`http://${h}:*`, `https://${h}:*`])]
      : origins,
    // The bind itself too (127.0.0.2, ...): a client calling the address it was given.
    ...(loopback ? { allowedHosts: [...LOOPBACK_NAMES, bind.includes(':') ? `[${bind}]` : bind, ...hosts] } : {}),
  };
}

/**
 * An allowed origin as the Origin header carries it (`scheme://host[:port]`, lower case, no
 * default port, no trailing slash), `*`, or why not: an entry with a path would otherwise
 * silently allow nothing.
 */
export function normalOrigin(given: string): string | Error {
  if (given === '*') return given;
  const port = given.endsWith(':*');
  try {
    const url = new URL(port ? `${given.slice(0, -2)}:1` : given);
    if (!/^https?:$/.test(url.protocol) || url.pathname !== '/' || url.search || url.hash || url.username)
      throw new Error();
    const origin = port ? `${url.protocol}//${url.hostname}:*` : url.origin;
    return origin;
  } catch {
    return new Error(
      `MCP allowed origin ${JSON.stringify(given.slice(0, 100))} is not scheme://host[:port] (the port may be *), nor *`,
    );
  }
}

/** `host[:port]` without its port (an IPv6 literal keeps its brackets). */
function hostName(host: string): string {
  const h = host.trim().toLowerCase();
  if (h.startsWith('[')) return h.slice(0, h.indexOf(']') + 1);
  const colon = h.indexOf(':');
  return colon < 0 ? h : h.slice(0, colon);
}

function originMatches(origin: string, allowed: string): boolean {
  if (allowed === '*') return true;
  const a = allowed.toLowerCase();
  if (!a.endsWith(':*')) return origin === a;
  // scheme://host:* : that scheme and host on any port, or none.
  const base = a.slice(0, -2);
  return origin === base || (origin.startsWith(`${base}:`) && /^\d+$/.test(origin.slice(base.length + 1)));
}

/** Why the request is refused (a 403), or undefined when it may go on. */
export function originRefusal(
  policy: OriginPolicy,
  origin: string | undefined,
  host: string | undefined,
): string | undefined {
  if (policy.allowedHosts) {
    const name = hostName(host ?? '');
    if (!policy.allowedHosts.some((h) => hostName(h) === name))
      return 'Forbidden: the Host header names no host this gateway serves (DNS rebinding protection)';
  }
  if (origin === undefined) return undefined;
  const o = origin.trim().toLowerCase();
  if (!policy.allowedOrigins.some((a) => originMatches(o, a)))
    return 'Forbidden: Origin not allowed (DNS rebinding protection); add it to the gateway MCP allowed origins';
  return undefined;
}
