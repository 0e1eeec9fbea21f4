import { Counter, Histogram, Registry } from 'prom-client';

/** The proxy's Prometheus metrics; one registry per app so tests and instances stay apart. */
export class ProxyMetrics {
  readonly registry = new Registry();
  readonly requests = new Counter({
    name: 'gateway_requests_total',
    help: 'Chat completion requests by model, provider and HTTP status.',
    labelNames: ['model', 'provider', 'status'],
    registers: [this.registry],
  });
  readonly latency = new Histogram({
    name: 'gateway_request_duration_seconds',
    help: 'Time from request to the last byte sent, by model and provider.',
    labelNames: ['model', 'provider'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
    registers: [this.registry],
  });
  readonly tokens = new Counter({
    name: 'gateway_tokens_total',
    help: 'Tokens by model, provider and direction (prompt, completion).',
    labelNames: ['model', 'provider', 'direction'],
    registers: [this.registry],
  });
}
