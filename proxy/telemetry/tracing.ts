import type { Usage } from '../upstreams/upstream.js';

/**
 * OpenTelemetry traces of the gateway, after the GenAI semantic conventions: one SERVER span per
 * request (`{operation} {model}`, with the request's model and parameters, the provider that
 * answered, token usage, error type) and a CLIENT child per upstream call (a retry or a fallback
 * is its own child), whose W3C trace context goes to in-cluster model servers in `traceparent`.
 * A caller's `traceparent` makes the request span its child. Off unless an OTLP endpoint is set
 * (the standard OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT; sampler and headers from the standard
 * OTEL_* variables too: otel-env.ts); off, the request path creates nothing. Prompts and answers
 * are never recorded (the conventions make them opt-in; they are the callers' data).
 */

/** GenAI operation names (gen_ai.operation.name) of the gateway's endpoints. */
export type GenAiOperation = 'chat' | 'text_completion' | 'embeddings' | 'count_tokens';

/**
 * Who serves a route: the provider system (gen_ai.provider.name: ollama, aws.bedrock, openai),
 * which its backend names, and the gateway's resource (namespace/name) behind it. A model that
 * cannot take traffic has no system to name: only its resource.
 */
export interface RouteProvider {
  provider: string;
  system?: string;
}

export interface RequestSpanStart {
  operation: GenAiOperation;
  /** The incoming request's header lookup, for traceparent/tracestate. */
  header: (name: string) => string | undefined;
  requestId: string;
}

export interface RequestSpanEnd {
  status: number;
  /** The route that answered (after a fallback, the fallback's); absent when routing failed. */
  route?: RouteProvider;
  usage?: Usage;
  errorType?: string;
  stream: boolean;
  firstTokenMs?: number;
}

export interface UpstreamSpan {
  /** Headers that carry this span's context to the upstream. */
  readonly headers: Record<string, string>;
  end(error?: { code: string; status: number }): void;
}

export interface RequestSpan {
  /** A child span for one call to a provider. */
  upstream(target: RouteProvider & { model: string; address?: string }): UpstreamSpan;
  /**
   * Names the model once the request is routed (a 404 keeps the generic name), with the
   * client's parameters worth an attribute (never message content).
   */
  routed(model: string, route: RouteProvider, params: Record<string, unknown>): void;
  end(outcome: RequestSpanEnd): void;
}

/** An MCP tools/call (proxy/mcp/): the GenAI conventions' execute_tool span, with MCP's attributes. */
export interface ToolSpanStart {
  tool: string;
  /** The McpServer that serves it. */
  server: string;
  /** The JSON-RPC id of the call. */
  callId: string;
  protocolVersion: string;
  header: (name: string) => string | undefined;
  requestId: string;
}

export interface ToolSpan {
  end(outcome: { status: number; errorType?: string }): void;
}

export interface RequestTracer {
  start(req: RequestSpanStart): RequestSpan;
  tool?(call: ToolSpanStart): ToolSpan;
  shutdown(): Promise<void>;
}
