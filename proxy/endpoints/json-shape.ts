import { invalidRequest, type ProxyError } from './errors.js';

/**
 * The shape of a JSON text, checked before it is parsed. JSON.parse of a 10 MiB body made of
 * millions of tiny values (`[{},{},…]`) allocates hundreds of MB, and a deep one is refused only
 * after it was built: both are decided here from the text alone, in one pass over its
 * characters that allocates nothing. Containers and commas outside strings bound the number of
 * values (every value but the first of a container follows a comma); brackets give the depth.
 * The text need not be valid JSON: JSON.parse still judges that, after this pass.
 */

export interface ShapeLimits {
  /** Deepest nesting of arrays and objects, the outermost being level 1. */
  maxDepth: number;
  /** Most values (containers, members and elements) in the whole text. */
  maxValues: number;
}

const QUOTE = 34;
const BACKSLASH = 92;
const COMMA = 44;
const OPEN_OBJECT = 123;
const OPEN_ARRAY = 91;
const CLOSE_OBJECT = 125;
const CLOSE_ARRAY = 93;

/** The refusal for a text of the wrong shape, naming the top-level field it is in; undefined when it fits. */
export function checkJsonShape(text: string, limits: ShapeLimits): ProxyError | undefined {
  let depth = 0;
  let values = 0;
  // The last string that ended at depth 1: in an object, the key of the value being read.
  let keyStart = -1;
  let keyEnd = -1;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const start = i;
      for (i++; i < n; i++) {
        const s = text.charCodeAt(i);
        if (s === BACKSLASH) i++;
        else if (s === QUOTE) break;
      }
      if (depth === 1) {
        keyStart = start + 1;
        keyEnd = i;
      }
    } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      depth++;
      values++;
      if (depth > limits.maxDepth) return tooDeep(fieldAt(text, depth, keyStart, keyEnd), limits.maxDepth);
      if (values > limits.maxValues) return tooMany(limits.maxValues);
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      depth--;
    } else if (c === COMMA) {
      values++;
      if (values > limits.maxValues) return tooMany(limits.maxValues);
    }
  }
  return undefined;
}

function fieldAt(text: string, depth: number, keyStart: number, keyEnd: number): string {
  return depth > 1 && keyStart >= 0 ? text.slice(keyStart, Math.min(keyEnd, keyStart + 256)) : '';
}

function tooDeep(field: string, max: number): ProxyError {
  const shown = field.length > 64 ? `${field.slice(0, 61)}...` : field;
  return invalidRequest(
    field
      ? `the field ${JSON.stringify(shown)} is nested more than ${max} levels deep`
      : `the request body is nested more than ${max} levels deep`,
    field ? shown : null,
  );
}

function tooMany(max: number): ProxyError {
  return invalidRequest(
    `the request body has more than ${max} JSON values; a chat request needs far fewer`,
    null,
    'too_many_values',
  );
}
