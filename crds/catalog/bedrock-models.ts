import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import yaml from 'js-yaml';

/**
 * What each Bedrock foundation model can do (bedrock-models.yaml beside this module): the model
 * lists report it, by the same foundation-model lookup prices use.
 */

export interface BedrockModelFacts {
  displayName: string;
  /** Tokens of input and output together. */
  contextWindow: number;
  /** Tokens per answer. */
  maxOutputTokens: number;
  tools?: boolean;
  reasoning?: boolean;
  images?: boolean;
  /** Where to move when AWS marks the model Legacy. */
  replacement?: string;
}

let cached: Readonly<Record<string, BedrockModelFacts>> | undefined;

export function loadBedrockModels(): Readonly<Record<string, BedrockModelFacts>> {
  cached ??= yaml.load(
    readFileSync(fileURLToPath(new URL('./bedrock-models.yaml', import.meta.url)), 'utf8'),
  ) as Record<string, BedrockModelFacts>;
  return cached;
}
