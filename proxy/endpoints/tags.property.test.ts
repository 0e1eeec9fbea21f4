import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ProxyError } from './errors.js';
import { formatTag, MAX_TAGS, parseTag, parseTags, type Tag, type TagSources } from './tags.js';

/**
 * Property tests of the tag parser (issue #10, bad input): whatever the headers and the body
 * hold, parseTags returns valid, de-duplicated tags or a 400 naming what is wrong; it never
 * throws. The rules are restated here from the documentation in tags.ts, independently of its
 * regular expressions: key 1-64 of [A-Za-z0-9_.-]; value 1-64 printable ASCII without ',' and
 * without leading or trailing space; items trimmed; split at the first ':'; at most 10 tags
 * after merging X-Tags, X-Gateway-Tags and body tags (in that order, first occurrence kept).
 */

const RUNS = 500;

const KEY_CHARS = [...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-'];
/** Printable ASCII but ','. */
const VALUE_CHARS = Array.from({ length: 0x7f - 0x20 }, (_, i) => String.fromCharCode(0x20 + i)).filter(
  (c) => c !== ',',
);
const VALUE_EDGE_CHARS = VALUE_CHARS.filter((c) => c !== ' ');
/** Characters a header item may carry around a tag: trimmed away by the parser. */
const HEADER_PAD = [' ', '\t'];
/** Everything String.prototype.trim removes, for the parser fed directly. */
const ANY_PAD = [
  ' ',
  '\t',
  '\n',
  '\r',
  '\v',
  '\f',
  '\u00a0',
  '\u1680',
  '\u2003',
  '\u2028',
  '\u2029',
  '\u3000',
  '\ufeff',
];

const isKey = (k: string) => k.length >= 1 && k.length <= 64 && [...k].every((c) => KEY_CHARS.includes(c));
const isValue = (v: string) =>
  v.length >= 1 &&
  v.length <= 64 &&
  [...v].every((c) => VALUE_CHARS.includes(c)) &&
  !v.startsWith(' ') &&
  !v.endsWith(' ');

/** The documented rule for one item: the tag it denotes, or undefined when it is malformed. */
function specTag(raw: string): Tag | undefined {
  const item = raw.trim();
  const colon = item.indexOf(':');
  if (colon < 0) return undefined;
  const key = item.slice(0, colon);
  const value = item.slice(colon + 1);
  return isKey(key) && isValue(value) ? { key, value } : undefined;
}

type Item = { raw: string; source: string };

/** The items of the sources in merge order, as the documentation describes them. */
function specItems(s: TagSources): Item[] {
  const items: Item[] = [];
  for (const [name, value] of [
    ['header X-Tags', s.xTags],
    ['header X-Gateway-Tags', s.xGatewayTags],
  ] as const) {
    for (const raw of value?.split(',') ?? []) if (raw.trim() !== '') items.push({ raw, source: name });
  }
  if (Array.isArray(s.body)) {
    for (const [i, raw] of s.body.entries())
      if (typeof raw === 'string') items.push({ raw, source: `body tags[${i}]` });
  }
  return items;
}

// A null body `tags` is absent, as OpenAI treats null optional fields.
const bodyIsWellFormed = (body: unknown) =>
  body === undefined || body === null || (Array.isArray(body) && [...body].every((t) => typeof t === 'string'));

/** Lone surrogates or control characters in an error message would be a log or header injection risk. */
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
// biome-ignore lint/suspicious/noControlCharactersInRegex: the test is about control characters
const CONTROL = /[\u0000-\u001f\u007f]/;

/** How the parser shows an offending item in its message (documented: at most 80 characters). */
const shown = (raw: string) => {
  const item = raw.trim();
  return JSON.stringify(item.length > 80 ? `${item.slice(0, 77)}...` : item);
};

/**
 * The invariants of any answer of parseTags: a 400 with the OpenAI error fields and a message
 * that names the offending source and item, or tags that follow the rules and are exactly the
 * de-duplicated items of the sources in merge order.
 */
function checkAnswer(sources: TagSources, result: Tag[] | ProxyError): void {
  const items = specItems(sources);
  if (result instanceof ProxyError) {
    expect(result.status).toBe(400);
    expect(result.type).toBe('invalid_request_error');
    expect(result.param).toBe('tags');
    expect(result.message.length).toBeGreaterThan(0);
    // At most 80 characters of the item are shown, each at most 6 once JSON-escaped (\ud800).
    expect(result.message.length).toBeLessThan(1024);
    expect(result.message).not.toMatch(CONTROL);
    expect(result.message).not.toMatch(LONE_SURROGATE);
    if (result.code === 'too_many_tags') {
      const distinct = new Set(items.map((i) => i.raw.trim()));
      const m = /^too many tags: (\d+) (given|after merging), at most (\d+) allowed$/.exec(result.message);
      expect(m, result.message).not.toBeNull();
      expect(Number(m?.[3])).toBe(MAX_TAGS);
      // Either a flood refused before parsing, or more than MAX_TAGS distinct tags.
      if (m?.[2] === 'given') expect(Number(m[1])).toBe(items.length);
      else expect(Number(m?.[1])).toBe(distinct.size);
      expect(Number(m?.[1])).toBeGreaterThan(m?.[2] === 'given' ? MAX_TAGS * 10 : MAX_TAGS);
      return;
    }
    expect(result.code).toBe('invalid_tag');
    if (result.message === 'tags must be an array of "key:value" strings') {
      expect(sources.body !== undefined && sources.body !== null && !Array.isArray(sources.body)).toBe(true);
      return;
    }
    const notString = /^tags\[(\d+)\] must be a string of the form key:value$/.exec(result.message);
    if (notString) {
      expect(Array.isArray(sources.body)).toBe(true);
      expect(typeof (sources.body as unknown[])[Number(notString[1])]).not.toBe('string');
      return;
    }
    // A malformed item: the message shows it and names where it came from.
    const culprit = items.find(
      (i) => specTag(i.raw) === undefined && result.message.startsWith(`tag ${shown(i.raw)} from ${i.source}`),
    );
    expect(culprit, result.message).toBeDefined();
    return;
  }
  // Accepted: the body was well formed, every item valid, and the answer is their de-duplication.
  expect(bodyIsWellFormed(sources.body)).toBe(true);
  expect(items.length).toBeLessThanOrEqual(MAX_TAGS * 10);
  expect(result.length).toBeLessThanOrEqual(MAX_TAGS);
  for (const t of result) {
    expect(isKey(t.key), t.key).toBe(true);
    expect(isValue(t.value), t.value).toBe(true);
  }
  const expected: string[] = [];
  for (const i of items) {
    const tag = specTag(i.raw);
    expect(tag, i.raw).toBeDefined();
    if (tag && !expected.includes(formatTag(tag))) expected.push(formatTag(tag));
  }
  expect(result.map(formatTag)).toEqual(expected);
}

const key = fc.string({ unit: fc.constantFrom(...KEY_CHARS), minLength: 1, maxLength: 64 });
const value = fc.oneof(
  fc.constantFrom(...VALUE_EDGE_CHARS),
  fc
    .tuple(
      fc.constantFrom(...VALUE_EDGE_CHARS),
      fc.string({ unit: fc.constantFrom(...VALUE_CHARS), maxLength: 62 }),
      fc.constantFrom(...VALUE_EDGE_CHARS),
    )
    .map(([a, b, c]) => a + b + c),
);
const tag = fc.record({ key, value });
const pad = (chars: string[]) => fc.string({ unit: fc.constantFrom(...chars), maxLength: 3 });

/** Items that are nearly tags: the interesting boundary of the grammar. */
const nearTag = fc
  .tuple(
    fc.oneof(key, fc.string({ maxLength: 70 }), fc.constant('')),
    fc.constantFrom(':', '::', '', ' :', ': '),
    fc.oneof(value, fc.string({ unit: 'binary', maxLength: 70 }), fc.constant('')),
  )
  .map(([k, sep, v]) => `${k}${sep}${v}`);
/** Raw strings a hostile client could send: binary (lone surrogates, NUL), RTL marks, emoji, CR/LF. */
const junk = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 200 }),
  fc.string({ unit: 'grapheme', maxLength: 50 }),
  fc.string({
    unit: fc.constantFrom(
      ',',
      ':',
      ' ',
      'a',
      'Z',
      '\r',
      '\n',
      '\r\nX-Api-Key: sk-evil',
      '\0',
      '\u202e',
      '\u200f',
      '\u05d0',
      '😀',
      '\ud800',
      '\udfff',
      '\ufeff',
    ),
    maxLength: 60,
  }),
  nearTag,
);
/** A few valid tags with header padding: most requests carry these, so acceptance is well covered too. */
const validItems = fc.array(
  fc.tuple(pad(HEADER_PAD), tag.map(formatTag), pad(HEADER_PAD)).map((a) => a.join('')),
  { maxLength: 4 },
);
const headerValue = fc.oneof(
  { arbitrary: validItems.map((a) => a.join(',')), weight: 3 },
  { arbitrary: junk, weight: 1 },
  {
    arbitrary: fc.array(fc.oneof(nearTag, tag.map(formatTag), junk), { maxLength: 15 }).map((a) => a.join(',')),
    weight: 1,
  },
);
const bodyTags = fc.oneof(
  { arbitrary: validItems, weight: 3 },
  {
    arbitrary: fc.anything({
      withSparseArray: true,
      withBoxedValues: true,
      withNullPrototype: true,
      withObjectString: true,
    }),
    weight: 1,
  },
  { arbitrary: fc.array(fc.oneof(nearTag, tag.map(formatTag), junk), { maxLength: 15 }), weight: 1 },
  { arbitrary: fc.array(fc.oneof(tag.map(formatTag), fc.anything()), { maxLength: 12 }), weight: 1 },
);
const anySources = fc.record(
  {
    xTags: headerValue,
    xGatewayTags: headerValue,
    body: bodyTags,
  },
  { requiredKeys: [] },
);

/** A valid set of tags, with duplicates, spread over the three sources with padding around the items. */
const spread = fc
  .uniqueArray(tag, { maxLength: MAX_TAGS, selector: formatTag })
  .chain((distinct) =>
    fc.record({
      distinct: fc.constant(distinct),
      placed: fc.array(
        fc.record({
          tag: distinct.length ? fc.constantFrom(...distinct) : fc.constant(undefined),
          source: fc.integer({ min: 0, max: 2 }),
          before: pad(HEADER_PAD),
          after: pad(HEADER_PAD),
        }),
        { maxLength: 30 },
      ),
      emptyItems: fc.boolean(),
    }),
  )
  .map(({ distinct, placed, emptyItems }) => {
    const lists: [string[], string[], string[]] = [[], [], []];
    const order: string[] = [];
    for (const p of placed) {
      if (!p.tag) continue;
      lists[p.source]?.push(`${p.before}${formatTag(p.tag)}${p.after}`);
    }
    for (const list of lists) for (const item of list) order.push(item.trim());
    const sep = emptyItems ? ', ,' : ',';
    const sources: TagSources = {
      ...(lists[0].length ? { xTags: lists[0].join(sep) } : {}),
      ...(lists[1].length ? { xGatewayTags: `${lists[1].join(sep)}${emptyItems ? ',' : ''}` } : {}),
      ...(lists[2].length ? { body: lists[2] } : {}),
    };
    return { distinct, sources, order };
  });

const sorted = (tags: Tag[]) => tags.map(formatTag).sort();

describe('parseTag (one item) against the documented grammar', () => {
  it('accepts exactly the items the rules allow, and never throws', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          nearTag,
          junk,
          fc.tuple(pad(ANY_PAD), tag.map(formatTag), pad(ANY_PAD)).map((a) => a.join('')),
        ),
        (raw) => {
          const r = parseTag(raw, 'header X-Tags');
          const expected = specTag(raw);
          if (expected) expect(r).toEqual(expected);
          else {
            expect(r).toBeInstanceOf(ProxyError);
            expect((r as ProxyError).message.startsWith(`tag ${shown(raw)} from header X-Tags`)).toBe(true);
          }
        },
      ),
      { numRuns: RUNS * 2 },
    );
  });
});

describe('parseTags on arbitrary input', () => {
  it('never throws; answers valid de-duplicated tags or a 400 naming the offending tag and its source', () => {
    fc.assert(
      fc.property(anySources, (sources) => {
        checkAnswer(sources, parseTags(sources));
      }),
      { numRuns: RUNS },
    );
  });

  it('keeps CR/LF, NUL and other header-injection attempts out of tags and out of error messages', () => {
    const injection = fc
      .tuple(
        tag.map(formatTag),
        fc.constantFrom('\r\n', '\n', '\r', '\0', '\u2028', '\u0085'),
        fc.string({ maxLength: 30 }),
      )
      .map(([t, nl, rest]) => `${t}${nl}${rest}`);
    fc.assert(
      fc.property(injection, fc.integer({ min: 0, max: 2 }), (raw, source) => {
        const sources: TagSources =
          source === 0 ? { xTags: raw } : source === 1 ? { xGatewayTags: raw } : { body: [raw] };
        const r = parseTags(sources);
        checkAnswer(sources, r);
        if (!(r instanceof ProxyError)) {
          for (const t of r) expect(`${t.key}${t.value}`).not.toMatch(/[\r\n\0\u0085\u2028]/);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('handles huge strings without echoing them: the message stays short', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1 << 20, max: 5 << 20 }),
        fc.constantFrom('x', 'é', '😀', '\ud800', ',', ' ', 'k:'),
        fc.integer({ min: 0, max: 2 }),
        (size, unit, source) => {
          const raw = unit.repeat(Math.ceil(size / unit.length));
          const sources: TagSources =
            source === 0 ? { xTags: raw } : source === 1 ? { xGatewayTags: raw } : { body: [raw] };
          const r = parseTags(sources);
          checkAnswer(sources, r);
        },
      ),
      { numRuns: 12 },
    );
  });

  it('refuses up to 10k tags with too_many_tags, whatever the source, duplicates included', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: MAX_TAGS * 10 + 1, max: 10_000 }),
        fc.integer({ min: 0, max: 2 }),
        fc.boolean(),
        (count, source, same) => {
          const items = Array.from({ length: count }, (_, i) => (same ? 'team:ml' : `t${i}:v`));
          const sources: TagSources =
            source === 0
              ? { xTags: items.join(',') }
              : source === 1
                ? { xGatewayTags: items.join(',') }
                : { body: items };
          const r = parseTags(sources);
          expect(r).toBeInstanceOf(ProxyError);
          expect((r as ProxyError).code).toBe('too_many_tags');
          expect((r as ProxyError).message).toBe(`too many tags: ${count} given, at most ${MAX_TAGS} allowed`);
        },
      ),
      { numRuns: 50 },
    );
  });

  it('refuses more than 10 distinct tags after merging, wherever they come from', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(tag, { minLength: MAX_TAGS + 1, maxLength: MAX_TAGS * 3, selector: formatTag }),
        fc.array(fc.integer({ min: 0, max: 2 }), { minLength: MAX_TAGS * 3, maxLength: MAX_TAGS * 3 }),
        (tags, where) => {
          const lists: [string[], string[], string[]] = [[], [], []];
          for (const [i, t] of tags.entries()) lists[where[i] ?? 0]?.push(formatTag(t));
          const sources: TagSources = { xTags: lists[0].join(','), xGatewayTags: lists[1].join(','), body: lists[2] };
          const r = parseTags(sources);
          expect(r).toBeInstanceOf(ProxyError);
          expect((r as ProxyError).message).toBe(
            `too many tags: ${tags.length} after merging, at most ${MAX_TAGS} allowed`,
          );
        },
      ),
      { numRuns: RUNS / 5 },
    );
  });
});

describe('parseTags on valid tags', () => {
  it('round-trips tags generated from the grammar: the answer is the de-duplicated items in merge order', () => {
    fc.assert(
      fc.property(spread, ({ sources, order }) => {
        const r = parseTags(sources);
        if (r instanceof ProxyError) throw new Error(`refused valid tags: ${r.message}`);
        checkAnswer(sources, r);
        expect(r.map(formatTag)).toEqual([...new Set(order)]);
      }),
      { numRuns: RUNS },
    );
  });

  it('gives the same set of tags however the items are spread over the sources', () => {
    fc.assert(
      fc.property(spread, fc.integer({ min: 0, max: 2 }), ({ sources, order }, target) => {
        const a = parseTags(sources);
        // The same items, all in one source, in reverse order.
        const reversed = [...order].reverse();
        const moved: TagSources =
          target === 0
            ? { xTags: reversed.join(',') }
            : target === 1
              ? { xGatewayTags: reversed.join(',') }
              : { body: reversed };
        const b = parseTags(moved);
        if (a instanceof ProxyError || b instanceof ProxyError) throw new Error('refused valid tags');
        expect(sorted(b)).toEqual(sorted(a));
        expect(new Set(sorted(a))).toEqual(new Set(order));
      }),
      { numRuns: RUNS },
    );
  });

  it('ignores duplicates when counting: the exact set of 10 repeated up to 100 items is accepted', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(tag, { minLength: MAX_TAGS, maxLength: MAX_TAGS, selector: formatTag }),
        fc.integer({ min: MAX_TAGS, max: MAX_TAGS * 10 }),
        (tags, count) => {
          const items = Array.from({ length: count }, (_, i) => formatTag(tags[i % tags.length] as Tag));
          const r = parseTags({ body: items });
          if (r instanceof ProxyError) throw new Error(r.message);
          expect(r).toEqual(tags);
        },
      ),
      { numRuns: RUNS / 5 },
    );
  });
});
