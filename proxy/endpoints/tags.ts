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

/** Whether a text may be a tag's value as it is (a token subject's, proxy/identity/). */
export const isTagValue = (value: string): boolean => VALUE.test(value);

export interface Tag {
  key: string;
  value: string;
}

/** Shown in errors: enough of the offending text to find it, never more than 80 characters. */
function show(raw: string): string {
  const clipped = raw.length > 80 ? `${raw.slice(0, 77)}...` : raw;
  return JSON.stringify(clipped);
}

export function parseTag(raw: string, source: TagSource): Tag | ProxyError {
  const item = raw.trim();
  const colon = item.indexOf(':');
  if (colon < 0)
    return invalidRequest(
      `tag ${show(item)} from ${sourceName(source)} is not of the form key:value`,
      'tags',
      'invalid_tag',
    );
  const key = item.slice(0, colon);
  const value = item.slice(colon + 1);
  if (!KEY.test(key)) {
    return invalidRequest(
      `tag ${show(item)} from ${sourceName(source)}: the key must be 1-64 characters of letters, digits, '_', '.' or '-'`,
      'tags',
      'invalid_tag',
    );
  }
  if (!VALUE.test(value)) {
    return invalidRequest(
      `tag ${show(item)} from ${sourceName(source)}: the value must be 1-64 printable ASCII characters without ',' and without leading or trailing spaces`,
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

/** The tag headers, in the order their tags are merged. */
const TAG_HEADERS = [
  ['header X-Tags', 'xTags'],
  ['header X-Gateway-Tags', 'xGatewayTags'],
  ['header X-LiteLLM-Tags', 'xLitellmTags'],
] as const;

/** Where a tag came from, named only in an error: its index in the body's array, or the place in words. */
type TagSource = string | number;
const sourceName = (s: TagSource) => (typeof s === 'number' ? `body tags[${s}]` : s);

export function parseTags(sources: TagSources): Tag[] | ProxyError {
  const items: string[] = [];
  const from: TagSource[] = [];
  for (const [source, field] of TAG_HEADERS) {
    const value = sources[field];
    if (value === undefined || value.trim() === '') continue;
    // Empty items (a trailing comma) carry no tag and are skipped.
    for (const item of value.split(',')) {
      if (item.trim() === '') continue;
      items.push(item);
      from.push(source);
    }
  }
  if (sources.body !== undefined && sources.body !== null) {
    if (!Array.isArray(sources.body))
      return invalidRequest('tags must be an array of "key:value" strings', 'tags', 'invalid_tag');
    for (const [i, item] of sources.body.entries()) {
      if (typeof item !== 'string')
        return invalidRequest(`tags[${i}] must be a string of the form key:value`, 'tags', 'invalid_tag');
      items.push(item);
      from.push(i);
    }
  }
  // Bound the work before parsing: a request with thousands of tags is rejected outright.
  if (items.length > MAX_TAGS * 10) {
    return invalidRequest(`too many tags: ${items.length} given, at most ${MAX_TAGS} allowed`, 'tags', 'too_many_tags');
  }
  const tags: Tag[] = [];
  for (const [i, item] of items.entries()) {
    const tag = parseTag(item, from[i] ?? '');
    if (tag instanceof ProxyError) return tag;
    // At most 100 items: a scan of those kept costs less than a set of joined strings.
    if (tags.some((t) => t.key === tag.key && t.value === tag.value)) continue;
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
