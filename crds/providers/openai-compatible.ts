import type { Dialect } from '../constants.js';
import { listOpenAIModels, OPENAI_ERRORS } from './openai.js';
import { OPENAI_PATHS, openAIErrorBody, type ProviderModule, rootOf } from './provider.js';
import { statusTableProvider } from './status-table-provider.js';

/**
 * Any server speaking OpenAI's API at spec.baseUrl (vLLM, TGI, llama.cpp, a hosted inference
 * API): chat, completions and embeddings pass through; the Responses API and Anthropic's
 * Messages reach it through the gateway's translators to chat, since few such servers speak
 * them. A key (APIKey) goes as a bearer token; None sends nothing.
 */

const NATIVE: readonly Dialect[] = ['openai-chat', 'openai-completions', 'openai-embeddings'];
const EMBEDDINGS: readonly Dialect[] = ['openai-embeddings'];

// Required by the CRD; the env override is for tests only.
const baseUrl: ProviderModule['baseUrl'] = (spec, env) =>
  rootOf(env, 'PAO_ENDPOINT_URL_OPENAI_COMPATIBLE', spec.baseUrl ?? '');

export const openaiCompatible: ProviderModule = statusTableProvider({
  type: 'openai-compatible',
  label: 'the OpenAI-compatible server',
  system: 'openai_compatible',
  endpointEnv: 'PAO_ENDPOINT_URL_OPENAI_COMPATIBLE',
  baseUrl,
  credentialStyle: 'bearer',
  dialects: (t) => (t.modelType === 'embedding' ? EMBEDDINGS : NATIVE),
  request: (t, dialect, body) => ({ url: `${t.baseUrl}${OPENAI_PATHS[dialect] ?? ''}`, headers: {}, body }),
  discover: listOpenAIModels(baseUrl),
  errorBody: openAIErrorBody,
  errors: OPENAI_ERRORS,
});
