/** Where a detector found something in a text: [start, end) in UTF-16 units, and what it is. */
export interface Span {
  start: number;
  end: number;
  category: string;
}

/** A detector: every span of its kind in the text, validated. Linear in the text's length. */
export type Detect = (text: string) => Span[];

/**
 * Every match of a global regular expression (the built-in ones, each written to run in linear
 * time: bounded repetitions, no nested quantifiers) for which `valid` holds, as spans of `category`.
 * `group`, when given, is the capture group whose text is the finding (a Bearer token, not the word).
 */
export function matches(
  text: string,
  re: RegExp,
  category: string,
  valid: (m: RegExpExecArray) => boolean = () => true,
  group = 0,
): Span[] {
  const out: Span[] = [];
  re.lastIndex = 0;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    if (m[0] === '') {
      re.lastIndex += 1;
      continue;
    }
    if (!valid(m)) continue;
    const found = m[group] ?? m[0];
    const start = m.index + m[0].indexOf(found);
    out.push({ start, end: start + found.length, category });
  }
  return out;
}

/**
 * The spans that do not overlap, earliest first, the longer of two starting together: what one
 * guardrail acts on (a card number inside a longer token is the token's, not a second finding).
 */
export function disjoint(spans: Span[]): Span[] {
  spans.sort((a, b) => a.start - b.start || b.end - a.end);
  const out: Span[] = [];
  let end = -1;
  for (const s of spans) {
    if (s.start < end) continue;
    out.push(s);
    end = s.end;
  }
  return out;
}

/** Letters of words written with spaces between them: Latin letters, digits. Scripts written without (Japanese) have no such edge. */
const WORD = /[A-Za-z0-9_\u00C0-\u024F]/;

/**
 * Where strings another checker found occur in a text, as spans of their categories: every
 * occurrence (a name found once is redacted everywhere), not inside a longer Latin word (Al is
 * not found in Alice; an address right after Japanese text is). Strings of one character are not
 * looked for.
 */
export function occurrences(found: readonly { text: string; category: string }[]): Detect {
  const wanted = found.filter((f) => f.text.length > 1);
  return (text) => {
    const out: Span[] = [];
    for (const f of wanted) {
      const n = f.text.length;
      const open = WORD.test(f.text[0] ?? '');
      const close = WORD.test(f.text[n - 1] ?? '');
      for (let i = text.indexOf(f.text); i !== -1; i = text.indexOf(f.text, i + n)) {
        if (open && WORD.test(text[i - 1] ?? '')) continue;
        if (close && WORD.test(text[i + n] ?? '')) continue;
        out.push({ start: i, end: i + n, category: f.category });
      }
    }
    return disjoint(out);
  };
}
