import {
  type Attributes,
  type Context,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type TextMapGetter,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import type {
  GenAiOperation,
  RequestSpan,
  RequestSpanEnd,
  RequestSpanStart,
  RequestTracer,
  RouteProvider,
  ToolSpan,
  ToolSpanStart,
  UpstreamSpan,
} from './tracing.js';

/** The RequestTracer over the OpenTelemetry SDK (proxy/telemetry/tracing.ts says what the spans hold). */

const propagator = new W3CTraceContextPropagator();

const PARAMS: Record<string, string> = {
  max_tokens: 'gen_ai.request.max_tokens',
  max_completion_tokens: 'gen_ai.request.max_tokens',
  temperature: 'gen_ai.request.temperature',
  top_p: 'gen_ai.request.top_p',
  frequency_penalty: 'gen_ai.request.frequency_penalty',
  presence_penalty: 'gen_ai.request.presence_penalty',
  seed: 'gen_ai.request.seed',
  n: 'gen_ai.request.choice.count',
};

/** The provider system, and the gateway's resource that served in an attribute of its own. */
function providerAttributes(route: RouteProvider): Attributes {
  const a: Attributes = {};
  if (route.system) a['gen_ai.provider.name'] = route.system;
  if (route.provider !== '') a['gateway.route.provider'] = route.provider;
  return a;
}

function paramAttributes(params: Record<string, unknown>): Attributes {
  const a: Attributes = {};
  for (const [param, attr] of Object.entries(PARAMS)) {
    const v = params[param];
    if (typeof v === 'number' && Number.isFinite(v)) a[attr] = v;
  }
  const stop = params.stop;
  if (typeof stop === 'string') a['gen_ai.request.stop_sequences'] = [stop];
  else if (Array.isArray(stop) && stop.every((s) => typeof s === 'string'))
    a['gen_ai.request.stop_sequences'] = stop.slice(0, 4);
  return a;
}

class OtelRequestSpan implements RequestSpan {
  private readonly ctx: Context;

  constructor(
    private readonly tracer: Tracer,
    private readonly span: Span,
    private readonly operation: GenAiOperation,
  ) {
    this.ctx = trace.setSpan(ROOT_CONTEXT, span);
  }

  routed(model: string, route: RouteProvider, params: Record<string, unknown>): void {
    this.span.updateName(`${this.operation} ${model}`);
    this.span.setAttributes({
      'gen_ai.request.model': model,
      ...providerAttributes(route),
      ...paramAttributes(params),
    });
  }

  upstream(target: RouteProvider & { model: string; address?: string }): UpstreamSpan {
    const attributes: Attributes = {
      'gen_ai.operation.name': this.operation,
      'gen_ai.request.model': target.model,
      ...providerAttributes(target),
    };
    if (target.address) {
      try {
        const url = new URL(target.address);
        attributes['server.address'] = url.hostname;
        if (url.port) attributes['server.port'] = Number(url.port);
      } catch {
        // Not a URL (a Bedrock region): no server attributes.
      }
    }
    const span = this.tracer.startSpan(
      `${this.operation} ${target.model}`,
      { kind: SpanKind.CLIENT, attributes },
      this.ctx,
    );
    const headers: Record<string, string> = {};
    propagator.inject(trace.setSpan(ROOT_CONTEXT, span), headers, {
      set: (carrier, key, value) => {
        carrier[key] = value;
      },
    });
    return {
      headers,
      end: (error) => {
        if (error) {
          span.setAttribute('error.type', error.code);
          span.setStatus({ code: SpanStatusCode.ERROR, message: error.code });
        }
        span.end();
      },
    };
  }

  end(o: RequestSpanEnd): void {
    const s = this.span;
    s.setAttribute('http.response.status_code', o.status);
    if (o.route) s.setAttributes(providerAttributes(o.route));
    if (o.usage) {
      s.setAttribute('gen_ai.usage.input_tokens', o.usage.promptTokens);
      s.setAttribute('gen_ai.usage.output_tokens', o.usage.completionTokens);
      if (o.usage.cachedTokens) s.setAttribute('gen_ai.usage.cache_read.input_tokens', o.usage.cachedTokens);
    }
    if (o.stream) s.setAttribute('gateway.stream', true);
    if (o.firstTokenMs !== undefined) s.setAttribute('gateway.time_to_first_token', o.firstTokenMs / 1000);
    if (o.errorType) {
      s.setAttribute('error.type', o.errorType);
      s.setStatus({ code: SpanStatusCode.ERROR, message: o.errorType });
    }
    s.end();
  }
}

const headerGetter = (header: (name: string) => string | undefined): TextMapGetter<null> => ({
  keys: () => ['traceparent', 'tracestate'],
  get: (_carrier, key) => header(key),
});

/** A tracer over an OpenTelemetry SDK provider: OTLP in production, any exporter in tests. */
export class OtelRequestTracer implements RequestTracer {
  private readonly provider: BasicTracerProvider;
  private readonly tracer: Tracer;

  constructor(exporter: SpanExporter, service: { name: string; version: string }) {
    this.provider = new BasicTracerProvider({
      resource: resourceFromAttributes({ 'service.name': service.name, 'service.version': service.version }),
      // Batches leave off the request path; a full queue drops spans rather than memory.
      spanProcessors: [new BatchSpanProcessor(exporter, { maxQueueSize: 2048, scheduledDelayMillis: 1000 })],
    });
    this.tracer = this.provider.getTracer('platform-ai-optimizer-proxy', service.version);
  }

  start(req: RequestSpanStart): RequestSpan {
    const parent = propagator.extract(ROOT_CONTEXT, null, headerGetter(req.header));
    // Named for the model once routed: a name a caller made up never becomes a span name.
    const span = this.tracer.startSpan(
      req.operation,
      {
        kind: SpanKind.SERVER,
        attributes: { 'gen_ai.operation.name': req.operation, 'gateway.request.id': req.requestId },
      },
      parent,
    );
    return new OtelRequestSpan(this.tracer, span, req.operation);
  }

  tool(call: ToolSpanStart): ToolSpan {
    const parent = propagator.extract(ROOT_CONTEXT, null, headerGetter(call.header));
    const span = this.tracer.startSpan(
      `execute_tool ${call.tool}`,
      {
        kind: SpanKind.SERVER,
        attributes: {
          'gen_ai.operation.name': 'execute_tool',
          'gen_ai.tool.name': call.tool,
          'gen_ai.tool.call.id': call.callId,
          // An MCP server's tool runs outside the agent: the conventions' "extension".
          'gen_ai.tool.type': 'extension',
          'mcp.method.name': 'tools/call',
          'mcp.protocol.version': call.protocolVersion,
          'jsonrpc.request.id': call.callId,
          'gateway.route.provider': call.server,
          'gateway.request.id': call.requestId,
        },
      },
      parent,
    );
    return {
      end: (o) => {
        span.setAttribute('http.response.status_code', o.status);
        if (o.errorType) {
          span.setAttribute('error.type', o.errorType);
          span.setStatus({ code: SpanStatusCode.ERROR });
        }
        span.end();
      },
    };
  }

  /** Exports what is buffered now. */
  flush(): Promise<void> {
    return this.provider.forceFlush();
  }

  /** Flushes what is buffered (a stopping proxy sends its last spans). */
  shutdown(): Promise<void> {
    return this.provider.shutdown();
  }
}

/** OTLP/HTTP (protobuf), configured by the standard OTEL_EXPORTER_OTLP_* variables. */
export const otlpExporter = (): SpanExporter => new OTLPTraceExporter();
