import type { ProviderType } from '../external-provider.js';
import { anthropic } from './anthropic.js';
import { azureOpenai } from './azure-openai.js';
import { bedrock } from './bedrock.js';
import { openai } from './openai.js';
import { openaiCompatible } from './openai-compatible.js';
import type { ProviderModule } from './provider.js';
import { vertexAi } from './vertex-ai.js';

/** Every provider's module, by spec.provider. */
export const PROVIDERS: Readonly<Record<ProviderType, ProviderModule>> = {
  bedrock,
  openai,
  anthropic,
  'azure-openai': azureOpenai,
  'vertex-ai': vertexAi,
  'openai-compatible': openaiCompatible,
};
