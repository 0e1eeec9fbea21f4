import { invalidRequest, ProxyError } from './errors.js';

/**
 * Request tags: `key:value` pairs from the X-Tags, X-Gateway-Tags and X-LiteLLM-Tags headers
 * (comma separated; the last is where LiteLLM's clients and the product's CLI send them) and the
 * body's `tags` array, merged in that order, trimmed, de-duplicated keeping the first occurrence. Rules: split at the first ':'; key 1-64 characters of
 * [A-Za-z0-9_.-]; value 1-64 printable ASCII characters, no ',' and no leading or trailing
 * space; at most 10 tags after merging.
 */

export const MAX_TAGS = 10;
const KEY = /^[A-Za-z0-9_.-]{1,64}$/;
// Printable ASCII is 0x20-0x7e; the comma separates header items.
const VALUE = /^[\x21-\x2b\x2d-\x7e]([\x20-\x2b\x2d-\x7e]{0,62}[\x21-\x2b\x2d-\x7e])?$/;

export interface Tag {
  key: string;
  value: string;
}

/** Shown in errors: enough of the offending text to find it, never more than 80 characters. */
function show(raw: string): string {
  const clipped = raw.length > 80 ? `${raw.slice(0, 77)}...` : raw;
  return JSON.stringify(clipped);
}

export function parseTag(raw: string, source: string): Tag | ProxyError {
  const item = raw.trim();
  const colon = item.indexOf(':');
  if (colon < 0)
    return invalidRequest(`tag ${show(item)} from ${source} is not of the form key:value`, 'tags', 'invalid_tag');
  const key = item.slice(0, colon);
  const value = item.slice(colon + 1);
  if (!KEY.test(key)) {
    return invalidRequest(
      `tag ${show(item)} from ${source}: the key must be 1-64 characters of letters, digits, '_', '.' or '-'`,
      'tags',
      'invalid_tag',
    );
  }
  if (!VALUE.test(value)) {
    return invalidRequest(
      `tag ${show(item)} from ${source}: the value must be 1-64 printable ASCII characters without ',' and without leading or trailing spaces`,
      'tags',
      'invalid_tag',
    );
  }
  return { key, value };
}

export interface TagSources {
  xTags?: string | undefined;
  xGatewayTags?: string | undefined;
  xLitellmTags?: string | undefined;
  body?: unknown;
}

export function parseTags(sources: TagSources): Tag[] | ProxyError {
  const raw: Array<[string, string]> = [];
  for (const [header, value] of [
    ['X-Tags', sources.xTags],
    ['X-Gateway-Tags', sources.xGatewayTags],
    ['X-LiteLLM-Tags', sources.xLitellmTags],
  ] as const) {
    if (value === undefined || value.trim() === '') continue;
    // Empty items (a trailing comma) carry no tag and are skipped.
    for (const item of value.split(',')) if (item.trim() !== '') raw.push([item, `header ${header}`]);
  }
  if (sources.body !== undefined && sources.body !== null) {
    if (!Array.isArray(sources.body))
      return invalidRequest('tags must be an array of "key:value" strings', 'tags', 'invalid_tag');
    for (const [i, item] of sources.body.entries()) {
      if (typeof item !== 'string')
        return invalidRequest(`tags[${i}] must be a string of the form key:value`, 'tags', 'invalid_tag');
      raw.push([item, `body tags[${i}]`]);
    }
  }
  // Bound the work before parsing: a request with thousands of tags is rejected outright.
  if (raw.length > MAX_TAGS * 10) {
    return invalidRequest(`too many tags: ${raw.length} given, at most ${MAX_TAGS} allowed`, 'tags', 'too_many_tags');
  }
  const seen = new Set<string>();
  const tags: Tag[] = [];
  for (const [item, source] of raw) {
    const tag = parseTag(item, source);
    if (tag instanceof ProxyError) return tag;
    const id = `${tag.key}:${tag.value}`;
    if (seen.has(id)) continue;
    seen.add(id);
    tags.push(tag);
  }
  if (tags.length > MAX_TAGS) {
    return invalidRequest(
      `too many tags: ${tags.length} after merging, at most ${MAX_TAGS} allowed`,
      'tags',
      'too_many_tags',
    );
  }
  return tags;
}

export const formatTag = (t: Tag): string => `${t.key}:${t.value}`;

/**
 * A key's enforced tags over the caller's: a caller tag with one of their keys and another value
 * is refused (a key of team ml cannot bill team web); the rest are added. Enforced tags count
 * toward MAX_TAGS.
 */
export function applyEnforcedTags(tags: Tag[], enforced: Tag[]): Tag[] | ProxyError {
  if (enforced.length === 0) return tags;
  const merged = [...enforced];
  for (const t of tags) {
    const own = enforced.find((e) => e.key === t.key);
    if (!own) merged.push(t);
    else if (own.value !== t.value) {
      return new ProxyError(
        400,
        'invalid_request_error',
        'tag_not_allowed',
        `tag ${show(`${t.key}:${t.value}`)}: this API key always sends ${t.key}:${own.value} and may not send another ${t.key}`,
        'tags',
      );
    }
  }
  if (merged.length > MAX_TAGS) {
    return invalidRequest(
      `too many tags: this API key applies ${enforced.length}, so a request may add at most ${MAX_TAGS - enforced.length} of its own`,
      'tags',
      'too_many_tags',
    );
  }
  return merged;
}
