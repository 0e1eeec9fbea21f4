import type { CommonStatus, Resource } from './meta.js';

export type ApiKeyRole = 'User' | 'Admin';
export type BudgetPeriod = 'Daily' | 'Weekly' | 'Monthly';

/** What a spent budget does to the next request: refuse it (429), or serve it on the routing policy's cheapest in-cluster model. */
type WhenSpent = 'Refuse' | 'Degrade';

export interface BudgetSpec {
  usd: number;
  period: BudgetPeriod;
  /** Default Refuse. */
  whenSpent?: WhenSpent;
}

/** Enabled: requests naming a model are routed too; Disabled: only `auto` is; Inherit (default): as the default RoutingPolicy says. */
export type KeyRouting = 'Enabled' | 'Disabled' | 'Inherit';

interface ApiKeyRateLimit {
  requestsPerSecond?: number;
  burst?: number;
  tokensPerMinute?: number;
}

export interface ApiKeySpec {
  team: string;
  /** Defaults to User. */
  role: ApiKeyRole;
  /** Enforced tags, key to value (team:<team> is always added). */
  tags?: Record<string, string>;
  /** Allow-list of model names; omitted: every routed model. */
  models?: string[];
  /** MCP servers and tools the key may use at /mcp; omitted: every McpServer and every tool it admits. */
  mcp?: ApiKeyMcp;
  rateLimit?: ApiKeyRateLimit;
  budget?: BudgetSpec;
  /** Whether requests that name a model are routed (RoutingPolicy); default Inherit. */
  routing?: KeyRouting;
  /** The RoutingPolicy this key's routed requests (and a spent budget's Degrade) use; default `default`. */
  routingPolicy?: string;
  /** The response cache for the key's requests; none when absent. */
  cache?: ApiKeyCache;
  /** RFC 3339. */
  expiresAt?: string;
  /** Changing it rotates the key. Defaults to 0. */
  rotation: number;
}

/** The response cache of a key's requests (proxy/cache/). */
export interface ApiKeyCache {
  /** Default Exact. */
  mode?: 'Exact' | 'Semantic' | 'Off';
  /** Default 3600. */
  ttlSeconds?: number;
  /** Default Team. */
  scope?: 'Team' | 'Key';
  /** Default false. */
  anyTemperature?: boolean;
  /** Semantic: default 0.95. */
  similarity?: number;
}

/** A key's MCP allow-list, its rate per tool and whether its tool calls' payloads are kept. */
export interface ApiKeyMcp {
  /**
   * Servers by McpServer name, each with the tools (the server's own names, at least one) the key may
   * call; an entry without tools: all of the server's. Omitted: every server; empty: none.
   */
  servers?: Array<{ name: string; tools?: string[] }>;
  /** Calls per second of one tool by this key (burst: at once); absent: the key's own request rate. */
  toolRateLimit?: { requestsPerSecond: number; burst?: number };
  /** Keep each tool call's arguments and result in its usage record (default false: sizes only). */
  recordPayloads?: boolean;
}

/** What the proxies observe and write into status.usage. */
export interface UsageStatus {
  period?: BudgetPeriod;
  periodStart?: string;
  spendUsd?: number;
  lastUsed?: string;
  updated?: string;
}

export interface ApiKeyStatus extends CommonStatus {
  digest?: string;
  keyHint?: string;
  rotation?: number;
  usage?: UsageStatus;
}

export type ApiKey = Resource<'ApiKey', ApiKeySpec, ApiKeyStatus>;
