import type { RequestTracer } from './tracing.js';

/**
 * The standard OTEL_* environment: whether it asks for traces, and the tracer it asks for. A
 * module of its own because it loads the SDK tracer (otel-tracer.ts, lazily), which implements
 * the contract in tracing.ts: kept in the contract, the two would import each other.
 */

/** Whether the environment asks for traces: an OTLP endpoint is set and the SDK not disabled. */
function tracingConfigured(env: NodeJS.ProcessEnv): boolean {
  if (env.OTEL_SDK_DISABLED === 'true') return false;
  if (!env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT && !env.OTEL_EXPORTER_OTLP_ENDPOINT) return false;
  return !env.OTEL_TRACES_EXPORTER || env.OTEL_TRACES_EXPORTER === 'otlp';
}

/**
 * The tracer the environment asks for: OTLP/HTTP (protobuf) to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
 * or OTEL_EXPORTER_OTLP_ENDPOINT, or none (tracing off). The SDK is loaded only when asked for:
 * a proxy without tracing neither loads nor initializes it.
 */
export async function tracerFromEnv(env: NodeJS.ProcessEnv, version: string): Promise<RequestTracer | undefined> {
  if (!tracingConfigured(env)) return undefined;
  const { OtelRequestTracer, otlpExporter } = await import('./otel-tracer.js');
  return new OtelRequestTracer(otlpExporter(), {
    name: env.OTEL_SERVICE_NAME || 'platform-ai-optimizer-proxy',
    version,
  });
}
