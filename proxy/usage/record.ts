import type { Tag } from '../endpoints/tags.js';
import type { Finding } from '../guardrails/findings.js';

/**
 * One record per proxied request, success or error, streaming or not: what the Usage and
 * Analytics reports are made of. Where the records go is the sink's business; recording
 * never blocks or fails a request.
 */
export interface UsageRecord {
  time: string;
  requestId: string;
  keyHashPrefix: string;
  /** The team of the ApiKey that sent it; '' for keys of no team (a keys file, the legacy Secret). */
  team?: string;
  /** The ApiKey's name (its spend survives rotation, unlike the key's hash). */
  apiKey?: string;
  model: string;
  /** The endpoint it came to (proxy/endpoints/endpoints.ts: chat, completions, embeddings, responses, messages). */
  endpoint?: string;
  /** The ModelDeployment or ExternalProvider that served it; empty when routing failed. */
  provider: string;
  tags: Tag[];
  promptTokens: number;
  completionTokens: number;
  /** List price of the tokens, USD. */
  costUsd: number;
  /**
   * The part of costUsd paid by the provider's free credits. With creditsUsd set, the store
   * decides it when it writes the record (credits are spent once, however many replicas record).
   */
  savingsUsd: number;
  /** The free credits of the provider that served it (its whole grant), when it has any. */
  creditsUsd?: number;
  latencyMs: number;
  /** Streaming only: time until the first content token. */
  firstTokenMs?: number;
  status: number;
  /** The OpenAI error code when status is not 200. */
  errorType?: string;
  stream: boolean;
  /** The upstream never reported usage (a cut-off stream): completion tokens counted from what was delivered. */
  tokensCounted?: boolean;
  /**
   * A tool call (endpoint 'mcp', proxy/mcp/): model is the tool's name as its server names it,
   * provider the McpServer. Sizes of the JSON-RPC request and of its answer, in bytes.
   * A call no server took (an unknown tool or server, one the key may not use) has provider '':
   * like a model request no model answered, it counts under the tool '(unrouted)' and adds no
   * rollup row per tag value, so callers cannot grow the rollups with made-up tool names.
   * Reported by GET /v1/usage/tools (store.ts UsageStore.tools), never by the model reports.
   */
  bytesIn?: number;
  bytesOut?: number;
  /**
   * The call's arguments and result (JSON, truncated), only for keys that opt in (ApiKey spec.mcp.recordPayloads).
   * At most 16 KiB of UTF-8 is kept: the recorder (before the spool) and the stores cut a longer one
   * (record-columns.ts MAX_PAYLOAD_BYTES, ending in '…[truncated]'); the producer should cut it first.
   */
  payload?: string;
  /**
   * Routed by a RoutingPolicy (proxy/routing-policy/): the model the caller asked for (`auto`, a
   * name), the policy, why the served model was chosen (a ROUTING_REASONS value), how many models the
   * cascade moved past, and what the same tokens would have cost on the requested model (for `auto`,
   * the policy's baseline), from the price table. `costUsd` includes the escalated-from answers' cost;
   * routing savings are counterfactualCostUsd - costUsd. Absent: not routed.
   */
  requestedModel?: string;
  routingPolicy?: string;
  routingReason?: string;
  escalations?: number;
  counterfactualCostUsd?: number;
  /** Tokens were used but the model has no price: costUsd is 0 because nobody knows it, not because it was free. */
  unpriced?: boolean;
  /** Answered from the response cache (proxy/cache/): no upstream call, no cost. */
  cache?: 'exact' | 'semantic';
  /** A cache hit: what the answer cost when it was made, which this request did not pay. */
  cacheSavingsUsd?: number;
  /** What the request's Guardrails found in it and its answer, counted by guardrail, category, action and place; never the text. */
  findings?: Finding[];
  /**
   * Served by a model its provider has deprecated (crds/catalog/lifecycle.ts; the answer carried a
   * Deprecation header): the reports count these (deprecatedRequests), so a team sees what still
   * calls a model before it retires.
   */
  deprecated?: boolean;
  /**
   * false: the caller never got the whole answer (the gateway was killed before its last byte
   * reached the socket, or the caller left first). Not a served request: the reports count it
   * apart (undeliveredRequests), its tokens and cost stay in the cost. Absent: delivered, or
   * delivered as far as anyone knows (a stream's final record is made after its last byte).
   */
  delivered?: false;
}

/**
 * The record of an answer its caller did not get whole: status and error as for a cut stream
 * (an error the answer already was is kept), its tokens and cost kept.
 */
function undelivered(rec: UsageRecord, status: number, errorType: string): UsageRecord {
  return rec.status >= 400 ? { ...rec, delivered: false } : { ...rec, status, errorType, delivered: false };
}

/** A crash cut the answer (a stream, or a whole answer whose last byte had not reached the socket). */
export const cutByRestart = (rec: UsageRecord): UsageRecord => undelivered(rec, 502, 'gateway_restarted');
/** The caller left before the answer's last byte reached the socket. */
export const leftBeforeDelivery = (rec: UsageRecord): UsageRecord => undelivered(rec, 499, 'client_closed_request');

export interface UsageSink {
  /**
   * `awaitsDelivery`: the record is of a whole answer the front door has yet to write; it says
   * whether the answer's last byte reached the socket with `delivered`.
   */
  record(rec: UsageRecord, awaitsDelivery?: boolean): void;
  /**
   * Whether the answer of a record made with `awaitsDelivery` reached the socket whole. Told
   * after the answer, never on its way: the sink keeps the mark with its next write.
   */
  delivered?(requestId: string, ok: boolean): void;
  /**
   * A stream began (its answer's first byte is about to go out): what to record should the
   * process die before the stream ends. Its final record, same request id, replaces it.
   */
  begin?(rec: UsageRecord): void;
  /**
   * Resolved once the records so far are durable enough to answer (the spool wrote them); none
   * when they already are. The server writes an answer after it. `alone`: no other request is in
   * progress, so there is nothing to group the write with.
   */
  durable?(alone?: boolean): Promise<void> | undefined;
}

/** Keeps records in memory: the sink of tests and of a proxy with no store configured. */
export class MemoryUsage implements UsageSink {
  readonly records: UsageRecord[] = [];
  constructor(private readonly max = 10_000) {}
  record(rec: UsageRecord): void {
    this.records.push(rec);
    if (this.records.length > this.max) this.records.splice(0, this.records.length - this.max);
  }
}
