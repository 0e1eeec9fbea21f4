/**
 * BERT's uncased WordPiece tokenizer (the one all-MiniLM-L6-v2 was trained with), as the built-in
 * embedding needs it: token ids only, no special tokens, no truncation. The basic step lowercases,
 * strips accents, spaces CJK characters apart and splits punctuation; WordPiece then takes the
 * longest vocabulary entry at each point of a word (continuations prefixed "##"), and a word it
 * cannot cover becomes [UNK]. Work is linear in the text: each word of at most MAX_WORD characters
 * is matched in at most MAX_WORD^2 lookups of short strings.
 */

const MAX_WORD = 100;
const UNK = '[UNK]';

/** Punctuation as BERT's tokenizer treats it: ASCII symbols and every Unicode P* character. */
const PUNCT = /[!-/:-@[-`{-~\p{P}]/u;
/** CJK ideographs, each a word of its own. */
const CJK = /[\u4E00-\u9FFF\u3400-\u4DBF\uF900-\uFAFF\u{20000}-\u{2FA1F}]/u;
const CONTROL = /[\p{Cc}\p{Cf}]/u;
const MARK = /\p{Mn}/gu;

export class WordPiece {
  private readonly vocab: Map<string, number>;
  readonly unk: number;

  /** `vocab`: vocab.txt's text, one entry a line, the line number its id. */
  constructor(vocab: string) {
    this.vocab = new Map();
    const lines = vocab.split('\n');
    for (let i = 0; i < lines.length; i++) {
      const entry = (lines[i] as string).replace(/\r$/, '');
      if (entry !== '' && !this.vocab.has(entry)) this.vocab.set(entry, i);
    }
    this.unk = this.vocab.get(UNK) ?? 100;
  }

  /** Token ids of `text`, at most `max` of them. */
  encode(text: string, max = Number.POSITIVE_INFINITY): number[] {
    const ids: number[] = [];
    for (const word of basicWords(text)) {
      this.wordPieces(word, ids);
      if (ids.length >= max) return ids.slice(0, max);
    }
    return ids;
  }

  private wordPieces(word: string, out: number[]): void {
    if (word.length > MAX_WORD) {
      out.push(this.unk);
      return;
    }
    const start = out.length;
    let i = 0;
    while (i < word.length) {
      let end = word.length;
      let id: number | undefined;
      while (end > i) {
        const piece = i === 0 ? word.slice(i, end) : `##${word.slice(i, end)}`;
        id = this.vocab.get(piece);
        if (id !== undefined) break;
        end--;
      }
      if (id === undefined) {
        out.length = start;
        out.push(this.unk);
        return;
      }
      out.push(id);
      i = end;
    }
  }
}

/** ASCII punctuation as BERT's tokenizer treats it: every symbol that is not a letter, digit or space. */
const asciiPunct = (c: number): boolean =>
  (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);

/**
 * The basic tokenizer's words: lowercased, accents stripped, punctuation and CJK characters apart.
 * ASCII is classified by code (the common case, and the request thread's); other characters by
 * their Unicode category.
 */
function* basicWords(text: string): Generator<string> {
  const lowered = text.toLowerCase().normalize('NFD').replace(MARK, '');
  let start = -1;
  let word = '';
  for (let i = 0; i < lowered.length; i++) {
    const c = lowered.charCodeAt(i);
    if (c < 128) {
      if (c <= 32 || c === 127) {
        if (start >= 0) yield word + lowered.slice(start, i);
        start = -1;
        word = '';
      } else if (asciiPunct(c)) {
        if (start >= 0 || word) yield word + lowered.slice(start < 0 ? i : start, i);
        start = -1;
        word = '';
        yield lowered[i] as string;
      } else if (start < 0) start = i;
      continue;
    }
    // A non-ASCII character (a surrogate pair read whole): the word so far is carried in `word`.
    const cp = lowered.codePointAt(i) ?? c;
    const ch = String.fromCodePoint(cp);
    if (start >= 0) word += lowered.slice(start, i);
    start = -1;
    if (cp > 0xffff) i++;
    if (/\s/u.test(ch)) {
      if (word) yield word;
      word = '';
    } else if (CONTROL.test(ch) || ch === '\uFFFD') {
      // dropped, as BERT's _clean_text drops them
    } else if (PUNCT.test(ch) || CJK.test(ch)) {
      if (word) yield word;
      word = '';
      yield ch;
    } else {
      word += ch;
    }
  }
  if (start >= 0) word += lowered.slice(start);
  if (word) yield word;
}
