import { RE2JS } from 're2js';

/**
 * A Guardrail's own pattern (spec.detectors.patterns[].regex) compiled as RE2 (linear time,
 * whatever the text), or why it does not compile: the proxy skips such a pattern and the
 * operator's status says why.
 */
export function compilePattern(regex: string): RE2JS | string {
  try {
    return RE2JS.compile(regex);
  } catch (err) {
    return err instanceof Error ? err.message.slice(0, 200) : 'invalid pattern';
  }
}
