import { type GuardrailService, SERVICE_PROVIDER_TYPES } from '../../../crds/guardrail.js';
import { isRecord } from '../../../crds/is-record.js';
import { categoryOf } from '../checker.js';
import type { AskOne } from './per-text.js';

/**
 * OpenAI's moderations endpoint (POST {base URL}/moderations with the model and the text, at an
 * openai or openai-compatible ExternalProvider, with its key) as a guardrail's service. Each
 * category the result flags is a finding of the whole text (harassment/threatening is
 * HarassmentThreatening).
 */

type ModerationSpec = NonNullable<GuardrailService['openAIModeration']>;

export function openAIModeration(spec: ModerationSpec): AskOne {
  const model = spec.model ?? 'omni-moderation-latest';
  return async (text, _where, calls, signal) => {
    const answer = await calls.post(
      { provider: spec.provider, types: SERVICE_PROVIDER_TYPES.openAIModeration, path: '/moderations' },
      { model, input: text },
      signal,
    );
    const result = isRecord(answer) && Array.isArray(answer.results) ? answer.results[0] : undefined;
    if (!isRecord(result) || !isRecord(result.categories)) throw new Error('the moderation answer has no result');
    const whole = Object.entries(result.categories)
      .filter(([, flagged]) => flagged === true)
      .map(([name]) => categoryOf(name));
    // A result flagged without a category of its own (the spec's categories are all optional to read).
    if (result.flagged === true && whole.length === 0) whole.push('Flagged');
    return { whole, found: [] };
  };
}
