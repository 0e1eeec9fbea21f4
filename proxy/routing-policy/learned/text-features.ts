/**
 * What a prompt's text proves about its task, measured, as the classifier's inputs beside the
 * embedding (classifier.ts): pasted code, a stack trace, LaTeX or mathematical notation, an
 * equation, a list of requirements, digits, length. No word lists: a word ("prime", "series",
 * "script") says nothing on its own; what it means in context is the embedding's business. Each
 * pattern is compiled once and linear in the prompt; code lines are read up to CODE_LINES_READ.
 */

const FENCE = /```/;
/** A line that opens as code in the common languages: a definition, an import, a statement, a tag. */
const CODE_START =
  /^(?:def|class|fn|func|function|import|from|package|public|private|static|const|let|var|return|if|for|while|switch|case|try|catch|except|async|await|#include|#define|SELECT|INSERT|UPDATE|CREATE|using|namespace|impl|struct|enum|interface|type)\b|^<\/?[a-zA-Z][^>]*>$/;
const CODE_LINES_READ = 400;
const STACK_TRACE =
  /Traceback \(most recent call last\)|^[ \t]{1,16}at [^\n]{1,300}:\d+(?::\d+)?\)?$|Exception in thread|^panic: |goroutine \d+ \[|Segmentation fault|error\[E\d{4}\]|^[ \t]{1,16}File "[^"\n]+", line \d+|NullPointerException|core dumped/m;
const MATH_NOTATION =
  /[∫∑∏√∂∇≤≥≠≈∞∈∀∃πθλσμ]|\\(?:frac|int|sum|sqrt|lim|prod|mathbb|cdot|infty|partial|le|ge|binom|pmod|forall|exists)\b|\$[^$\n]{0,60}[\\^_{][^$\n]{0,60}\$/;
const EQUATION = /\d {0,3}[+*^×÷=<>] {0,3}\(?-?\d|[a-z] {0,3}\^ {0,3}\d|\b[a-z] {0,3}[=<>≤≥] {0,3}-?\d|\bf ?\( ?x ?\)/i;
const LIST_ITEM = /^[ \t]*(?:\d{1,2}[.)]|[-*•]|[a-z][.)])[ \t]+\S/gm;
const DIGIT = /\d/g;

/** Names of the measured features, in the classifier's input order (after the embedding). */
export const TEXT_FEATURES = [
  'fence',
  'codeLines',
  'stackTrace',
  'mathNotation',
  'equation',
  'listItems',
  'digits',
  'length',
] as const;

/** Lines of the prompt that read as code, up to `cap`, each line tested on its own. */
function codeLines(prompt: string, cap: number): number {
  let n = 0;
  let start = 0;
  for (let read = 0; read < CODE_LINES_READ && start <= prompt.length && n < cap; read++) {
    const end = prompt.indexOf('\n', start);
    const line = prompt.slice(start, end === -1 ? prompt.length : end).trim();
    start = end === -1 ? prompt.length + 1 : end + 1;
    if (line === '') continue;
    const last = line.charCodeAt(line.length - 1);
    // ; { } end a statement or open or close a block; => is an arrow function or a match arm.
    if (last === 59 || last === 123 || last === 125 || line.includes('=>') || CODE_START.test(line)) n++;
  }
  return n;
}

function count(re: RegExp, text: string, cap: number): number {
  re.lastIndex = 0;
  let n = 0;
  while (n < cap && re.exec(text) !== null) n++;
  re.lastIndex = 0;
  return n;
}

/** The measured features of a prompt, each in 0..1, in TEXT_FEATURES' order. */
export function textFeatures(prompt: string): number[] {
  const lines = codeLines(prompt, 30);
  const digits = count(DIGIT, prompt.slice(0, 4000), 4000);
  return [
    FENCE.test(prompt) ? 1 : 0,
    lines / 30,
    STACK_TRACE.test(prompt) ? 1 : 0,
    MATH_NOTATION.test(prompt) ? 1 : 0,
    lines < 3 && EQUATION.test(prompt) ? 1 : 0,
    count(LIST_ITEM, prompt, 10) / 10,
    Math.min(1, digits / Math.max(40, Math.min(prompt.length, 4000)) / 0.3),
    Math.min(1, Math.log2(1 + prompt.length) / 14),
  ];
}
