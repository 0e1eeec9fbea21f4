import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { createInterface } from 'node:readline';
import type { KubeAccess, KubeRequestOptions } from './kube-access.js';

/**
 * A small JSON client for the Kubernetes API, shared by the operator and the proxy.
 *
 * The configuration and authentication come from a KubeAccess (kube-access.ts: a pod's own
 * ServiceAccount, or client-node's KubeConfig for kubeconfig files and exec plugins); the
 * requests are made here so that every patch names its content type explicitly (the typed APIs
 * default to JSON-patch, a known trap), list and watch return the same plain JSON, and every
 * request can be counted.
 */

/**
 * What every object has, loosely enough that client-node's model types (optional metadata)
 * and this API's types both fit.
 */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; namespace?: string; uid?: string; resourceVersion?: string };
}

export interface KubeList<T> {
  /** e.g. apps/v1; the items of a list carry neither apiVersion nor kind themselves. */
  apiVersion?: string;
  /** e.g. DeploymentList. */
  kind?: string;
  items: T[];
  metadata: { resourceVersion?: string; continue?: string };
}

type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';

export interface WatchEvent<T> {
  type: WatchEventType;
  object: T;
}

/** A failed API request: the HTTP status and the Status object's reason and message. */
export class KubeApiError extends Error {
  constructor(
    readonly status: number,
    readonly reason: string,
    message: string,
    readonly method: string,
    readonly path: string,
  ) {
    super(`${method} ${path}: ${status} ${reason}: ${message}`);
    this.name = 'KubeApiError';
  }
}

export const isNotFound = (err: unknown): boolean => err instanceof KubeApiError && err.status === 404;
export const isConflict = (err: unknown): boolean => err instanceof KubeApiError && err.status === 409;
export const isGone = (err: unknown): boolean => err instanceof KubeApiError && err.status === 410;

export interface ResourceRef {
  group: string;
  version: string;
  plural: string;
  namespace?: string;
  name?: string;
  subresource?: string;
}

/** REST path of a resource collection, object or subresource. */
export function resourcePath(ref: ResourceRef): string {
  const base = ref.group ? `/apis/${ref.group}/${ref.version}` : `/api/${ref.version}`;
  const ns = ref.namespace ? `/namespaces/${encodeURIComponent(ref.namespace)}` : '';
  const name = ref.name ? `/${encodeURIComponent(ref.name)}` : '';
  const sub = ref.name && ref.subresource ? `/${ref.subresource}` : '';
  return `${base}${ns}/${ref.plural}${name}${sub}`;
}

type Query = Record<string, string | number | boolean | undefined>;

function withQuery(path: string, query: Query = {}): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined) params.set(k, String(v));
  const qs = params.toString();
  return qs ? `${path}?${qs}` : path;
}

export interface KubeClientOptions {
  /**
   * Called once per API request (method, path without query), e.g. to count requests. A watch is
   * told as WATCH, the API server's verb for it, so that counts can tell it from a GET.
   */
  onRequest?: (method: string, path: string) => void;
  userAgent?: string;
  /** Per-request timeout for non-watch requests. */
  timeoutMs?: number;
}

export class KubeClient {
  private readonly server: URL;

  constructor(
    private readonly kc: KubeAccess,
    private readonly options: KubeClientOptions = {},
  ) {
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new Error('kubeconfig has no current cluster');
    this.server = new URL(cluster.server);
  }

  private async open(
    method: string,
    path: string,
    body: string | undefined,
    contentType: string | undefined,
    signal: AbortSignal | undefined,
    timeoutMs: number | undefined,
    verb = method,
    accept = 'application/json',
  ): Promise<IncomingMessage> {
    const url = new URL(path, this.server);
    const opts: KubeRequestOptions = {
      method,
      protocol: url.protocol,
      hostname: url.hostname,
      port: url.port,
      path: `${url.pathname}${url.search}`,
      headers: {
        accept,
        'user-agent': this.options.userAgent ?? 'platform-ai-optimizer',
        ...(contentType ? { 'content-type': contentType } : {}),
        ...(body !== undefined ? { 'content-length': String(Buffer.byteLength(body)) } : {}),
      },
      ...(signal ? { signal } : {}),
    };
    // Sets the CA, client certificate and Authorization header of the current user.
    await this.kc.applyToHTTPSOptions(opts);
    this.options.onRequest?.(verb, url.pathname);
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    return new Promise((resolve, reject) => {
      const req = send(opts, resolve);
      req.on('error', reject);
      if (timeoutMs) req.setTimeout(timeoutMs, () => req.destroy(new Error(`timeout after ${timeoutMs} ms`)));
      req.end(body);
    });
  }

  async request<T>(
    method: string,
    path: string,
    /** accept: the media types taken (the API server's JWKS is application/jwk-set+json). */
    init: { body?: unknown; contentType?: string; query?: Query; accept?: string; signal?: AbortSignal } = {},
  ): Promise<T> {
    const body = init.body === undefined ? undefined : JSON.stringify(init.body);
    const full = withQuery(path, init.query);
    const res = await this.open(
      method,
      full,
      body,
      init.contentType ?? (body ? 'application/json' : undefined),
      init.signal,
      this.options.timeoutMs ?? 30_000,
      method,
      init.accept,
    );
    const chunks: Buffer[] = [];
    for await (const chunk of res) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const status = res.statusCode ?? 0;
    if (status < 200 || status >= 300) {
      let reason = res.statusMessage ?? 'Error';
      let message = text.slice(0, 500);
      try {
        const s = JSON.parse(text) as { reason?: string; message?: string };
        reason = s.reason ?? reason;
        message = s.message ?? message;
      } catch {
        // not a Status object
      }
      throw new KubeApiError(status, reason, message, method, path);
    }
    return (text ? JSON.parse(text) : undefined) as T;
  }

  /** The object, or undefined when it does not exist. */
  async get<T>(path: string): Promise<T | undefined> {
    try {
      return await this.request<T>('GET', path);
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  /** `signal`: a list abandoned (an informer stopping) ends at once, not at the request's timeout. */
  list<T>(path: string, query: Query = {}, signal?: AbortSignal): Promise<KubeList<T>> {
    return this.request<KubeList<T>>('GET', path, { query, ...(signal ? { signal } : {}) });
  }

  create<T>(path: string, obj: T): Promise<T> {
    return this.request<T>('POST', path, { body: obj });
  }

  /** Server-side apply: the manager owns exactly the fields it sends. */
  apply<T>(path: string, obj: T, fieldManager: string, force = true): Promise<T> {
    return this.request<T>('PATCH', path, {
      body: obj,
      contentType: 'application/apply-patch+yaml',
      query: { fieldManager, force },
    });
  }

  mergePatch<T>(path: string, patch: unknown, query: Query = {}): Promise<T> {
    return this.request<T>('PATCH', path, { body: patch, contentType: 'application/merge-patch+json', query });
  }

  replace<T>(path: string, obj: T): Promise<T> {
    return this.request<T>('PUT', path, { body: obj });
  }

  async delete(path: string, query: Query = {}): Promise<boolean> {
    try {
      await this.request('DELETE', path, { query });
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw err;
    }
  }

  /**
   * Streams watch events until the server ends the watch (resolves), the signal aborts
   * (resolves), or the request fails (rejects with KubeApiError; 410 means relist).
   */
  async watch<T>(path: string, query: Query, onEvent: (e: WatchEvent<T>) => void, signal: AbortSignal): Promise<void> {
    let res: IncomingMessage;
    try {
      res = await this.open(
        'GET',
        withQuery(path, { ...query, watch: true }),
        undefined,
        undefined,
        signal,
        undefined,
        'WATCH',
      );
    } catch (err) {
      if (signal.aborted) return;
      throw err;
    }
    const status = res.statusCode ?? 0;
    if (status !== 200) {
      const chunks: Buffer[] = [];
      for await (const chunk of res) chunks.push(chunk as Buffer);
      let reason = res.statusMessage ?? 'Error';
      let message = '';
      try {
        const s = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { reason?: string; message?: string };
        reason = s.reason ?? reason;
        message = s.message ?? '';
      } catch {
        // not a Status object
      }
      throw new KubeApiError(status, reason, message, 'WATCH', path);
    }
    const lines = createInterface({ input: res, crlfDelay: Number.POSITIVE_INFINITY });
    try {
      for await (const line of lines) {
        if (!line) continue;
        onEvent(JSON.parse(line) as WatchEvent<T>);
      }
    } catch (err) {
      if (signal.aborted) return;
      throw err;
    } finally {
      // A handler that throws (410 in an ERROR event) leaves the stream open otherwise.
      res.destroy();
    }
  }
}
