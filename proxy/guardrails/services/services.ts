import type { GuardrailService } from '../../../crds/guardrail.js';
import type { Checker } from '../checker.js';
import { bedrockGuardrail } from './bedrock-guardrail.js';
import { openAIModeration } from './openai-moderation.js';
import { type AskOne, perText } from './per-text.js';
import { presidioAnalyzer } from './presidio-analyzer.js';

/**
 * The external services a Guardrail may ask (spec.detectors.services), one module each: how one
 * text is asked about, made from the service's kind where the spec gives that kind.
 */
const SERVICE_KINDS: readonly ((
  spec: GuardrailService,
) => { ask: AskOne; local: boolean; leaves: boolean } | undefined)[] = [
  (s) => s.bedrockGuardrail && { ask: bedrockGuardrail(s.bedrockGuardrail), local: false, leaves: true },
  (s) => s.openAIModeration && { ask: openAIModeration(s.openAIModeration), local: false, leaves: true },
  (s) => s.presidio && { ask: presidioAnalyzer(s.presidio), local: true, leaves: false },
];

/** A service as a Checker; undefined where it names no kind (the schema allows exactly one). */
export function compileService(spec: GuardrailService): Checker | undefined {
  for (const kind of SERVICE_KINDS) {
    const made = kind(spec);
    if (made) {
      const timeoutMs = (spec.timeoutSeconds ?? 3) * 1000;
      const { ask, local, leaves } = made;
      return perText({ name: spec.name, timeoutMs, onFailure: spec.onFailure ?? 'Allow', local, leaves }, ask);
    }
  }
  return undefined;
}
