import type Anthropic from '@anthropic-ai/sdk';

/**
 * A model server's Anthropic Message as Anthropic's spec has it, which the gateway sends
 * (proxy/conformance/): what Ollama 0.17.4 and vLLM 0.32 leave out is null (stop_sequence,
 * stop_details, container, the usage's newer fields, a text block's citations), the usage's cache
 * counts 0. What the server did send is kept: the tests compare the rest field for field.
 */
export const messageAsSpecHas = (m: Anthropic.Message) => ({
  ...m,
  stop_sequence: m.stop_sequence ?? null,
  stop_details: m.stop_details ?? null,
  container: m.container ?? null,
  content: contentAsSpecHas(m.content),
  usage: {
    ...m.usage,
    cache_creation: m.usage.cache_creation ?? null,
    cache_creation_input_tokens: m.usage.cache_creation_input_tokens ?? 0,
    cache_read_input_tokens: m.usage.cache_read_input_tokens ?? 0,
    inference_geo: m.usage.inference_geo ?? null,
    output_tokens_details: m.usage.output_tokens_details ?? null,
    server_tool_use: m.usage.server_tool_use ?? null,
    service_tier: m.usage.service_tier ?? null,
  },
});

/** Content blocks as the spec has them: a text block's citations null, a tool call's caller direct. */
export const contentAsSpecHas = (content: Anthropic.ContentBlock[]) =>
  content.map((b) =>
    b.type === 'text'
      ? { ...b, citations: b.citations ?? null }
      : b.type === 'tool_use'
        ? { ...b, caller: (b as { caller?: unknown }).caller ?? { type: 'direct' } }
        : b,
  );
