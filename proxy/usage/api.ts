import type { Env, Hono } from 'hono';
import { invalidRequest, ProxyError } from '../endpoints/errors.js';
import { parseTag, type Tag } from '../endpoints/tags.js';
import type { UsageReports } from './reports.js';
import { DEFAULT_GROUP_LIMIT, type Granularity, MAX_GROUP_LIMIT, type UsageQuery } from './store.js';

/**
 * The reporting APIs, on the proxy with the same API keys:
 *   GET /v1/usage      requests, input/output tokens, cost, savings
 *   GET /v1/analytics  cost, request volume, latency p50/p95/p99, error rate
 *   GET /v1/tags       known tags matching ?search= (at most 50)
 * Query: from, to (ISO 8601; default the last 7 days), granularity hour|day, groupBy model |
 * provider | endpoint (chat, completions, embeddings, responses, messages) | a tag key, tag=key:value repeated (all must match), and limit (groups reported by
 * name, default 20, at most 100; the others are summed as `_other`, their count in otherGroups).
 */

const DAY = 86_400_000;
const MAX_RANGE_DAYS = 400;
const GROUP_KEY = /^[A-Za-z0-9_.-]{1,64}$/;

export function parseUsageQuery(params: URLSearchParams, now = new Date()): UsageQuery | ProxyError {
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
  const g = params.get('granularity') ?? (to.getTime() - from.getTime() <= 2 * DAY ? 'hour' : 'day');
  if (g !== 'hour' && g !== 'day') return invalidRequest('granularity must be hour or day', 'granularity');
  const groupBy = params.get('groupBy') ?? 'model';
  if (!GROUP_KEY.test(groupBy))
    return invalidRequest('groupBy must be model, provider, endpoint or a tag key', 'groupBy');
  const tags: Tag[] = [];
  for (const raw of params.getAll('tag')) {
    const t = parseTag(raw, 'query parameter tag');
    if (t instanceof ProxyError) return t;
    tags.push(t);
  }
  if (tags.length > 10) return invalidRequest('at most 10 tag filters', 'tag');
  const rawLimit = params.get('limit');
  const limit = rawLimit === null || rawLimit === '' ? DEFAULT_GROUP_LIMIT : Number(rawLimit);
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_GROUP_LIMIT) {
    return invalidRequest(`limit must be a whole number from 1 to ${MAX_GROUP_LIMIT}`, 'limit');
  }
  return { from, to, granularity: g as Granularity, groupBy, tags, limit };
}

export function usageRoutes<E extends Env>(
  app: Hono<E>,
  reports: UsageReports,
  /** Authenticates the caller and says whose usage it may read: one team's, or all (no team). */
  authorize: (headers: Headers) => { team?: string },
): void {
  const query = (url: string) => {
    const q = parseUsageQuery(new URL(url).searchParams);
    if (q instanceof ProxyError) throw q;
    return q;
  };
  app.get('/v1/usage', async (c) => {
    const scope = authorize(c.req.raw.headers);
    return c.json(await reports.usage({ ...query(c.req.url), ...scope }));
  });
  app.get('/v1/analytics', async (c) => {
    const scope = authorize(c.req.raw.headers);
    return c.json(await reports.analytics({ ...query(c.req.url), ...scope }));
  });
  app.get('/v1/tags', async (c) => {
    const scope = authorize(c.req.raw.headers);
    const search = (c.req.query('search') ?? '').slice(0, 129);
    return c.json({ data: await reports.tags(search, 50, scope.team) });
  });
}
