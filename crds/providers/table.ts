import type { ProviderType } from '../external-provider.js';
import { anthropic } from './anthropic.js';
import { azureOpenai } from './azure-openai.js';
import { openai } from './openai.js';
import { openaiCompatible } from './openai-compatible.js';
import type { HostedProvider, HostedType } from './provider.js';
import { vertexAi } from './vertex-ai.js';

/** Every hosted provider but Bedrock (whose SDK-based modules predate this table), by spec.provider. */
export const HOSTED_PROVIDERS: Readonly<Record<HostedType, HostedProvider>> = {
  openai,
  anthropic,
  'azure-openai': azureOpenai,
  'vertex-ai': vertexAi,
  'openai-compatible': openaiCompatible,
};

export const isHosted = (type: ProviderType): type is HostedType => type !== 'bedrock';

/** How callers' errors (its label) and traces (its gen_ai.provider.name) name each provider. */
export const PROVIDER_NAMES: Readonly<Record<ProviderType, { label: string; system: string }>> = {
  bedrock: { label: 'Bedrock', system: 'aws.bedrock' },
  ...HOSTED_PROVIDERS,
};
