import {
  createCipheriv,
  createDecipheriv,
  createHash,
  createSecretKey,
  type KeyObject,
  randomBytes,
} from 'node:crypto';

/**
 * An MCP session of the gateway, sealed into its Mcp-Session-Id: the caller's key (the first
 * characters of its hash: a session is only good with the key that opened it), the protocol
 * revision negotiated, and the session the gateway opened on each upstream server. Any replica
 * holding the same sealing key opens it, so a session outlives the replica that began it (a
 * restart, a rollout, a connection that lands elsewhere) with nothing shared but that key.
 * AES-256-GCM: callers can neither read the upstream sessions nor forge or alter one.
 * Terminated sessions (DELETE) are remembered by the replica that ended them, for as long as
 * a session lives.
 */

export interface UpstreamSession {
  /** The upstream's Mcp-Session-Id; absent for a stateless server. */
  id?: string;
  /** The revision the upstream negotiated with the gateway (its MCP-Protocol-Version header). */
  version: string;
}

export interface McpSession {
  /** Hash prefix of the key that opened it. */
  key: string;
  version: string;
  /** The servers of the session by name (one for /mcp/<server>). */
  upstream: Record<string, UpstreamSession>;
  /** Epoch seconds it began. */
  began: number;
  /** The client's capabilities relayed to the servers (sampling, elicitation, roots); none: absent. */
  client?: Record<string, unknown>;
}

/**
 * A short digest of a session id: what sealed stream ids carry to be good for that session only
 * (proxy/mcp/server-stream.ts, proxy/mcp/call-stream.ts), never the id itself.
 */
export const sessionDigest = (sessionId: string): string =>
  createHash('sha256').update(sessionId).digest('base64url').slice(0, 22);

/** A session lives this long after it began; then the client is told to initialize again (404). */
export const SESSION_TTL_SECONDS = 24 * 3600;
const TERMINATED_MAX = 100_000;
const OPENED_MAX = 10_000;

// A KeyObject, made once: a raw key given to each cipher is turned into one every time (it showed in the profile).
const derive = (secret: string): KeyObject =>
  createSecretKey(createHash('sha256').update('pao-mcp-session\0').update(secret).digest());

export class SessionSealer {
  private readonly fallback: KeyObject;
  private derived: { secret: string; key: KeyObject } | undefined;
  private readonly terminated = new Map<string, number>();
  private readonly opened = new Map<string, { key: KeyObject; session: McpSession }>();

  /**
   * `secret`: the sealing secret every replica shares (the operator's Secret in a cluster, a flag
   * standalone), read at each use so that one arriving later takes over; none: a random key of
   * this replica's own (its sessions end with it, and clients initialize again on the 404).
   */
  constructor(private readonly secret: () => string | undefined = () => undefined) {
    this.fallback = derive(randomBytes(32).toString('hex'));
  }

  private get key(): KeyObject {
    const secret = this.secret();
    if (!secret) return this.fallback;
    if (this.derived?.secret !== secret) this.derived = { secret, key: derive(secret) };
    return this.derived.key;
  }

  seal(session: McpSession): string {
    return this.sealValue(session);
  }

  /**
   * Any value sealed with the sessions' key (a GET stream's event id: proxy/mcp/server-stream.ts),
   * for any replica to open and nobody else to read or forge.
   */
  sealValue(value: unknown): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv);
    const body = Buffer.concat([cipher.update(JSON.stringify(value), 'utf8'), cipher.final()]);
    return Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64url');
  }

  /** What sealValue sealed; undefined for anything else (another key, altered, too long). */
  openValue(token: string): unknown {
    if (token.length > 8192) return undefined;
    const raw = Buffer.from(token, 'base64url');
    if (raw.length < 29) return undefined;
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.key, raw.subarray(0, 12));
      decipher.setAuthTag(raw.subarray(12, 28));
      return JSON.parse(Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8'));
    } catch {
      return undefined;
    }
  }

  /** The session an id carries, or undefined when it is not one of ours, expired, or terminated. */
  open(id: string, now = Date.now()): McpSession | undefined {
    if (id.length > 8192 || this.terminated.has(id)) return undefined;
    // Sessions opened lately, by id: a session sends many requests, and each would decrypt again.
    const known = this.opened.get(id);
    if (known && known.key === this.key)
      return now / 1000 - known.session.began > SESSION_TTL_SECONDS ? undefined : known.session;
    const session = this.unseal(id, now);
    if (session) {
      if (this.opened.size >= OPENED_MAX) this.opened.delete(this.opened.keys().next().value as string);
      this.opened.set(id, { key: this.key, session });
    }
    return session;
  }

  private unseal(id: string, now: number): McpSession | undefined {
    const session = this.openValue(id) as McpSession | undefined;
    if (!session || typeof session.began !== 'number') return undefined;
    return now / 1000 - session.began > SESSION_TTL_SECONDS ? undefined : session;
  }

  terminate(id: string, now = Date.now()): void {
    // Bounded: the oldest go first, and entries older than a session's life are useless anyway.
    if (this.terminated.size >= TERMINATED_MAX) {
      const oldest = this.terminated.keys().next().value;
      if (oldest !== undefined) this.terminated.delete(oldest);
    }
    this.terminated.set(id, now);
    this.opened.delete(id);
  }
}
