import type { Env, Hono } from 'hono';
import { invalidRequest, ProxyError } from '../endpoints/errors.js';
import { parseTag, type Tag } from '../endpoints/tags.js';
import type { UsageReports } from './reports.js';
import {
  DEFAULT_GROUP_LIMIT,
  DEFAULT_TOOL_CALLS,
  type Granularity,
  type GuardrailQuery,
  MAX_GROUP_LIMIT,
  MAX_TOOL_CALLS,
  type ToolCallQuery,
  type ToolQuery,
  type UsageQuery,
} from './store.js';

/**
 * The reporting APIs, on the proxy with the same API keys:
 *   GET /v1/usage             served requests, undelivered ones (undeliveredRequests: their answers
 *                             never reached their callers whole), input/output tokens, cost (both's),
 *                             free-credit savings (savingsUsd), routing savings (routingSavingsUsd),
 *                             routed requests, escalation rate
 *   GET /v1/analytics         cost, served request volume and undelivered, latency p50/p95/p99,
 *                             error rate (of the served), routed requests, escalation rate
 *   GET /v1/usage/routing     requests routed by a RoutingPolicy: per group their share of the
 *                             routed requests, escalations, cost, counterfactual cost, routing savings
 *   GET /v1/tags              known tags matching ?search= (at most 50)
 *   GET /v1/usage/tools       tool calls through /mcp by server and tool: calls, errors, error
 *                             rate, latency p50/p95/p99, bytes in and out
 *   GET /v1/usage/tools/calls the tool calls themselves, newest first (payloads of keys that opted in)
 *   GET /v1/usage/guardrails  Guardrail findings: per group (guardrail, team, category or a tag's
 *                             value) and guardrail, category, action and place, the findings and
 *                             the requests they were in; totals, requests blocked
 * Query: from, to (ISO 8601; default the last 7 days), granularity hour|day, groupBy model |
 * provider | endpoint (chat, completions, embeddings, responses, messages) | a tag key, tag=key:value repeated (all must match), and limit (groups reported by
 * name, default 20, at most 100; the others are summed as `_other`, their count in otherGroups).
 * The model reports leave tool calls (endpoint mcp) out. The routing report takes the same query;
 * groupBy model is the served model, and groupBy policy groups by RoutingPolicy (from the raw
 * records: within their retention). The tool reports take groupBy tool
 * (default: a group per server and tool) | server, and server= and tool= filters; the listing
 * takes from, to, tag, server, tool and limit (default 100, at most 1000).
 */

const DAY = 86_400_000;
const MAX_RANGE_DAYS = 400;
const GROUP_KEY = /^[A-Za-z0-9_.-]{1,64}$/;
/** An McpServer's or a tool's name: 1-256 characters, no control characters. */
const TOOL_NAME = /^[^\p{Cc}]{1,256}$/u;

interface Window {
  from: Date;
  to: Date;
}

function parseWindow(params: URLSearchParams, now: Date): Window | ProxyError {
  const time = (name: string, fallback: Date): Date | ProxyError => {
    const raw = params.get(name);
    if (raw === null || raw === '') return fallback;
    const d = new Date(raw);
    return Number.isNaN(d.getTime())
      ? invalidRequest(`${name} must be an ISO 8601 time, got ${JSON.stringify(raw.slice(0, 64))}`, name)
      : d;
  };
  const to = time('to', now);
  if (to instanceof ProxyError) return to;
  const from = time('from', new Date(to.getTime() - 7 * DAY));
  if (from instanceof ProxyError) return from;
  if (from >= to) return invalidRequest('from must be before to', 'from');
  if (to.getTime() - from.getTime() > MAX_RANGE_DAYS * DAY)
    return invalidRequest(`the range may span at most ${MAX_RANGE_DAYS} days`, 'from');
  return { from, to };
}

function parseGranularity(params: URLSearchParams, { from, to }: Window): Granularity | ProxyError {
  const g = params.get('granularity') ?? (to.getTime() - from.getTime() <= 2 * DAY ? 'hour' : 'day');
  if (g !== 'hour' && g !== 'day') return invalidRequest('granularity must be hour or day', 'granularity');
  return g;
}

function parseTags(params: URLSearchParams): Tag[] | ProxyError {
  const tags: Tag[] = [];
  for (const raw of params.getAll('tag')) {
    const t = parseTag(raw, 'query parameter tag');
    if (t instanceof ProxyError) return t;
    tags.push(t);
  }
  if (tags.length > 10) return invalidRequest('at most 10 tag filters', 'tag');
  return tags;
}

function parseLimit(params: URLSearchParams, fallback: number, max: number): number | ProxyError {
  const raw = params.get('limit');
  const limit = raw === null || raw === '' ? fallback : Number(raw);
  if (!Number.isInteger(limit) || limit < 1 || limit > max) {
    return invalidRequest(`limit must be a whole number from 1 to ${max}`, 'limit');
  }
  return limit;
}

/** server= and tool= of the tool reports, when given. */
function parseToolFilters(params: URLSearchParams): { server?: string; tool?: string } | ProxyError {
  const out: { server?: string; tool?: string } = {};
  for (const name of ['server', 'tool'] as const) {
    const v = params.get(name);
    if (v === null || v === '') continue;
    if (!TOOL_NAME.test(v)) return invalidRequest(`${name} must be 1-256 characters without control characters`, name);
    out[name] = v;
  }
  return out;
}

export function parseUsageQuery(params: URLSearchParams, now = new Date()): UsageQuery | ProxyError {
  const window = parseWindow(params, now);
  if (window instanceof ProxyError) return window;
  const granularity = parseGranularity(params, window);
  if (granularity instanceof ProxyError) return granularity;
  const groupBy = params.get('groupBy') ?? 'model';
  if (!GROUP_KEY.test(groupBy))
    return invalidRequest('groupBy must be model, provider, endpoint or a tag key', 'groupBy');
  const tags = parseTags(params);
  if (tags instanceof ProxyError) return tags;
  const limit = parseLimit(params, DEFAULT_GROUP_LIMIT, MAX_GROUP_LIMIT);
  if (limit instanceof ProxyError) return limit;
  return { ...window, granularity, groupBy, tags, limit };
}

/** The query of GET /v1/usage/tools. */
export function parseToolQuery(params: URLSearchParams, now = new Date()): ToolQuery | ProxyError {
  const window = parseWindow(params, now);
  if (window instanceof ProxyError) return window;
  const granularity = parseGranularity(params, window);
  if (granularity instanceof ProxyError) return granularity;
  const groupBy = params.get('groupBy') ?? 'tool';
  if (groupBy !== 'tool' && groupBy !== 'server') return invalidRequest('groupBy must be tool or server', 'groupBy');
  const tags = parseTags(params);
  if (tags instanceof ProxyError) return tags;
  const filters = parseToolFilters(params);
  if (filters instanceof ProxyError) return filters;
  const limit = parseLimit(params, DEFAULT_GROUP_LIMIT, MAX_GROUP_LIMIT);
  if (limit instanceof ProxyError) return limit;
  return { ...window, granularity, groupBy, tags, ...filters, limit };
}

/** The query of GET /v1/usage/tools/calls. */
export function parseToolCallQuery(params: URLSearchParams, now = new Date()): ToolCallQuery | ProxyError {
  const window = parseWindow(params, now);
  if (window instanceof ProxyError) return window;
  const tags = parseTags(params);
  if (tags instanceof ProxyError) return tags;
  const filters = parseToolFilters(params);
  if (filters instanceof ProxyError) return filters;
  const limit = parseLimit(params, DEFAULT_TOOL_CALLS, MAX_TOOL_CALLS);
  if (limit instanceof ProxyError) return limit;
  return { ...window, tags, ...filters, limit };
}

/** The query of GET /v1/usage/guardrails: groupBy guardrail (default), team, category or a tag key. */
function parseGuardrailQuery(params: URLSearchParams, now = new Date()): GuardrailQuery | ProxyError {
  const window = parseWindow(params, now);
  if (window instanceof ProxyError) return window;
  const groupBy = params.get('groupBy') ?? 'guardrail';
  if (!GROUP_KEY.test(groupBy))
    return invalidRequest('groupBy must be guardrail, team, category or a tag key', 'groupBy');
  const tags = parseTags(params);
  if (tags instanceof ProxyError) return tags;
  return { ...window, groupBy, tags };
}

export function usageRoutes<E extends Env>(
  app: Hono<E>,
  reports: UsageReports,
  /** Authenticates the caller and says whose usage it may read: one team's, or all (no team). */
  authorize: (headers: Headers) => Promise<{ team?: string }>,
): void {
  const parsed = <Q>(url: string, parse: (params: URLSearchParams) => Q | ProxyError): Q => {
    const q = parse(new URL(url).searchParams);
    if (q instanceof ProxyError) throw q;
    return q;
  };
  const query = (url: string) => parsed(url, parseUsageQuery);
  app.get('/v1/usage', async (c) => {
    const scope = await authorize(c.req.raw.headers);
    return c.json(await reports.usage({ ...query(c.req.url), ...scope }));
  });
  app.get('/v1/analytics', async (c) => {
    const scope = await authorize(c.req.raw.headers);
    return c.json(await reports.analytics({ ...query(c.req.url), ...scope }));
  });
  app.get('/v1/usage/routing', async (c) => {
    const scope = await authorize(c.req.raw.headers);
    return c.json(await reports.routing({ ...query(c.req.url), ...scope }));
  });
  app.get('/v1/tags', async (c) => {
    const scope = await authorize(c.req.raw.headers);
    const search = (c.req.query('search') ?? '').slice(0, 129);
    return c.json({ data: await reports.tags(search, 50, scope.team) });
  });
  app.get('/v1/usage/tools', async (c) => {
    const scope = await authorize(c.req.raw.headers);
    return c.json(await reports.tools({ ...parsed(c.req.url, parseToolQuery), ...scope }));
  });
  app.get('/v1/usage/tools/calls', async (c) => {
    const scope = await authorize(c.req.raw.headers);
    const q = { ...parsed(c.req.url, parseToolCallQuery), ...scope };
    return c.json({ from: q.from.toISOString(), to: q.to.toISOString(), data: await reports.toolCalls(q) });
  });
  app.get('/v1/usage/guardrails', async (c) => {
    const scope = await authorize(c.req.raw.headers);
    return c.json(await reports.guardrails({ ...parsed(c.req.url, parseGuardrailQuery), ...scope }));
  });
}
