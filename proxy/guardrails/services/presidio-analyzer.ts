import type { GuardrailService } from '../../../crds/guardrail.js';
import { isRecord } from '../../../crds/is-record.js';
import { categoryOf, type Found } from '../checker.js';
import type { AskOne } from './per-text.js';

/**
 * A Presidio analyzer (its REST service: POST /analyze with the text, its language, the entity
 * types and the least score) as a guardrail's service. Each entity it finds is a finding of its
 * type (EMAIL_ADDRESS is EmailAddress), acted on where its text occurs. Presidio counts offsets
 * in code points (Python's), JavaScript in UTF-16 units: the found text is cut by code points.
 */

type PresidioSpec = NonNullable<GuardrailService['presidio']>;

export function presidioAnalyzer(spec: PresidioSpec): AskOne {
  const url = `${spec.url.replace(/\/+$/, '')}/analyze`;
  const body = (text: string) => ({
    text,
    language: spec.language ?? 'en',
    score_threshold: spec.scoreThreshold ?? 0.5,
    ...(spec.entities?.length ? { entities: spec.entities } : {}),
  });
  return async (text, _where, calls, signal) => {
    const answer = await calls.post({ url }, body(text), signal);
    if (!Array.isArray(answer)) throw new Error('the Presidio analyzer answered no list of results');
    const points = Array.from(text);
    const found: Found[] = [];
    for (const r of answer) {
      if (!isRecord(r) || typeof r.entity_type !== 'string') continue;
      const { start, end } = r;
      if (typeof start !== 'number' || typeof end !== 'number' || start < 0 || end > points.length || end <= start)
        continue;
      found.push({ text: points.slice(start, end).join(''), category: categoryOf(r.entity_type) });
    }
    return { whole: [], found };
  };
}
