import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { ModelLoadReport } from '../../crds/observability/proxy-load.js';
import type { Tag } from '../endpoints/tags.js';
import type { Finding } from '../guardrails/findings.js';

/**
 * The proxy's Prometheus metrics; one registry per app so tests and instances stay apart.
 * Tags become labels only for an allow-list of keys (default project, team, environment), so
 * a caller inventing tags cannot blow up the number of series.
 */

const DEFAULT_TAG_LABELS = ['project', 'team', 'environment'];

const OTHER = '_other';

export interface RequestObservation {
  model: string;
  provider: string;
  tags: Tag[];
  status: number;
  /** Error code ('' on success). */
  code: string;
  seconds: number;
  /** Until the first content token of a stream; absent for whole answers. */
  firstTokenSeconds?: number;
  usage?: { promptTokens: number; completionTokens: number };
  costUsd: number;
}

/**
 * One label set's series. The counters are tallied here and handed to prom-client when scraped
 * (Tally): its labelled inc() hashes and validates the label object on every call, even through a
 * child from labels(), which was the largest share of the accounting stage in the gateway's profile.
 */
interface Children {
  /** The counters' labels (model, provider, tags) and the request counter's with its status. */
  labels: Record<string, string>;
  statusLabels: Record<string, string>;
  requests: number;
  prompt: number;
  completion: number;
  cost: number;
  latency: Histogram.Internal<string>;
  firstToken: Histogram.Internal<string>;
  perToken: Histogram.Internal<string>;
}

type Tally = 'requests' | 'prompt' | 'completion' | 'cost';

const countOf = (n: number): number => (Number.isFinite(n) && n > 0 ? n : 0);

/** Requests in flight for one model and provider (the gauge reads n when scraped). */
export interface InFlight {
  readonly model: string;
  readonly provider: string;
  n: number;
}

const labelName = (key: string) => `tag_${key.replace(/[^A-Za-z0-9_]/g, '_')}`;

export class ProxyMetrics {
  readonly registry = new Registry();
  readonly tagKeys: string[];
  private readonly tagLabelNames: string[];
  readonly requests: Counter;
  readonly errors: Counter = new Counter({
    name: 'pao_gateway_errors_total',
    help: 'Failed chat completion requests by model, provider, status and error code.',
    labelNames: ['model', 'provider', 'status', 'code'],
    registers: [this.registry],
  });
  readonly latency: Histogram = new Histogram({
    name: 'pao_gateway_request_duration_seconds',
    help: 'Time from request to the last byte sent, by model and provider.',
    labelNames: ['model', 'provider'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
    registers: [this.registry],
  });
  // Buckets of the OpenTelemetry GenAI conventions for these two measures.
  readonly firstToken: Histogram = new Histogram({
    name: 'pao_gateway_time_to_first_token_seconds',
    help: 'Time from request to the first content token of a streamed answer, by model and provider.',
    labelNames: ['model', 'provider'],
    buckets: [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10],
    registers: [this.registry],
  });
  readonly perToken: Histogram = new Histogram({
    name: 'pao_gateway_time_per_output_token_seconds',
    help: 'Time per output token after the first of a streamed answer, by model and provider.',
    labelNames: ['model', 'provider'],
    buckets: [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5],
    registers: [this.registry],
  });
  private readonly inFlight = new Map<string, InFlight>();
  readonly tokens: Counter;
  readonly cost: Counter;
  readonly usageDropped: Counter = new Counter({
    name: 'pao_gateway_usage_records_dropped_total',
    help: 'Usage records dropped because the recorder queue was full or the store failed.',
    registers: [this.registry],
  });
  readonly usageSpoolSkipped: Counter = new Counter({
    name: 'pao_gateway_usage_spool_skipped_total',
    help: 'Damaged or torn records the usage spool skipped when reading itself back (a crash mid-write, a bad disk).',
    registers: [this.registry],
  });
  /** Bytes the usage spool holds on disk; set by main once it has one. */
  usageSpoolBytes: () => number = () => 0;
  readonly retries: Counter = new Counter({
    name: 'pao_gateway_upstream_retries_total',
    help: 'Upstream calls tried again after a failure before any byte reached the caller, by model, provider and error code.',
    labelNames: ['model', 'provider', 'code'],
    registers: [this.registry],
  });
  readonly fallbacks: Counter = new Counter({
    name: 'pao_gateway_fallbacks_total',
    help: 'Requests handed to a fallback model, by requested model, fallback model and the error code that caused it.',
    labelNames: ['model', 'fallback', 'code'],
    registers: [this.registry],
  });
  // No key label: anything derived from a key (even a hash prefix) helps an offline guess.
  readonly rateLimited: Counter = new Counter({
    name: 'pao_gateway_rate_limited_total',
    help: 'Requests refused with 429 because their API key ran out of its request or token rate.',
    registers: [this.registry],
  });
  readonly budgetRefused: Counter<'scope'> = new Counter({
    name: 'pao_gateway_budget_exhausted_total',
    help: 'Requests refused with 429 insufficient_quota: the budget of their key (scope=key) or of one of their tags (scope=tag) is spent.',
    labelNames: ['scope'],
    registers: [this.registry],
  });
  readonly cacheLookups: Counter<'kind' | 'result'> = new Counter({
    name: 'pao_gateway_cache_results_total',
    help: 'The response cache: lookups that hit or missed, answers kept, and store errors (each a miss), by kind (exact, semantic).',
    labelNames: ['kind', 'result'],
    registers: [this.registry],
  });
  readonly guardrailCheckFailures: Counter<'guardrail' | 'detector'> = new Counter({
    name: 'pao_gateway_guardrail_check_failures_total',
    help: 'Guardrail judges and services that could not answer (unreachable, refused, too slow, an answer neither safe nor unsafe), by guardrail and detector (judge, service/<name>): the text passed (onFailure Allow) or was refused with 503 (Block).',
    labelNames: ['guardrail', 'detector'],
    registers: [this.registry],
  });
  readonly guardrailFindings: Counter<'guardrail' | 'category' | 'action' | 'where'> = new Counter({
    name: 'pao_gateway_guardrail_findings_total',
    help: 'Findings of Guardrails in requests and answers: by guardrail, category (Email, PaymentCard, ... or a pattern), the action taken (Block, Redact, Mask, RouteInCluster, Log) and where (request, answer). Never the text.',
    labelNames: ['guardrail', 'category', 'action', 'where'],
    registers: [this.registry],
  });
  readonly routingDecisions: Counter<'policy' | 'from' | 'to' | 'reason'> = new Counter({
    name: 'pao_gateway_routing_decisions_total',
    help: 'Requests a RoutingPolicy routed: by policy, the model asked for (from: auto, <policy>/auto or a routed name), the model that served (to) and why (score, kept, constraints, cascade, budget-degraded, guardrail-in-cluster).',
    labelNames: ['policy', 'from', 'to', 'reason'],
    registers: [this.registry],
  });
  readonly rateLimitFallbacks: Counter = new Counter({
    name: 'pao_gateway_rate_limit_fallbacks_total',
    help: 'Rate-limit checks this replica answered with its own buckets because Redis did not answer in time.',
    registers: [this.registry],
  });
  readonly unpriced: Counter = new Counter({
    name: 'pao_gateway_unpriced_requests_total',
    help: 'Requests that used tokens of a model with no price (recorded with cost 0 and marked unpriced), by model and provider.',
    labelNames: ['model', 'provider'],
    registers: [this.registry],
  });
  readonly countedTokens: Counter = new Counter({
    name: 'pao_gateway_counted_usage_total',
    help: 'Streams cut before the upstream reported usage, billed with the completion tokens counted from what was delivered, by model and provider.',
    labelNames: ['model', 'provider'],
    registers: [this.registry],
  });
  readonly queueWait: Histogram<'model'> = new Histogram({
    name: 'pao_gateway_queue_wait_seconds',
    help: 'Time requests for an in-cluster model waited in this proxy for a free replica slot (busy replicas, or waking from zero); only requests that waited.',
    labelNames: ['model'],
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
    registers: [this.registry],
  });
  readonly mcpToolCalls: Counter<'server' | 'tool' | 'status'> = new Counter({
    name: 'pao_gateway_mcp_tool_calls_total',
    help: "MCP tool calls through the gateway, by McpServer, tool (the server's own name; only tools the server lists) and the status recorded.",
    labelNames: ['server', 'tool', 'status'],
    registers: [this.registry],
  });
  readonly mcpToolLatency: Histogram<'server'> = new Histogram({
    name: 'pao_gateway_mcp_tool_call_seconds',
    help: 'Time from a tools/call reaching the gateway to its answer, by McpServer.',
    labelNames: ['server'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry],
  });
  /** The in-cluster models' load, read when scraped (set by the gateway's wiring). */
  modelLoad: () => Record<string, ModelLoadReport> = () => ({});

  private readonly seenValues: Set<string>[];
  private readonly children = new Map<string, Children>();

  constructor(
    tagKeys: string[] = DEFAULT_TAG_LABELS,
    private readonly maxTagValues = 100,
  ) {
    this.tagKeys = tagKeys;
    this.seenValues = tagKeys.map(() => new Set());
    this.tagLabelNames = tagKeys.map(labelName);
    const tagged = ['model', 'provider', ...this.tagLabelNames];
    // What observeRequest tallied since the last scrape, handed over as each is read.
    const children = this.children;
    const handOver = (counter: Counter, tally: Tally, labels: (c: Children) => Record<string, string>) => {
      for (const c of children.values()) {
        const n = c[tally];
        if (n === 0) continue;
        // Taken before it is handed over: a value prom-client refused would be lost, never refused again at every scrape.
        c[tally] = 0;
        counter.inc(labels(c), n);
      }
    };
    this.requests = new Counter({
      name: 'pao_gateway_requests_total',
      help: 'Chat completion requests by model, provider, HTTP status and allow-listed tags.',
      labelNames: [...tagged, 'status'],
      registers: [this.registry],
      collect() {
        handOver(this, 'requests', (c) => c.statusLabels);
      },
    });
    const flights = this.inFlight;
    new Gauge({
      name: 'pao_gateway_requests_in_flight',
      help: 'Requests this proxy has routed and not yet answered in full, by model and provider (every provider).',
      labelNames: ['model', 'provider'],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const f of flights.values()) this.set({ model: f.model, provider: f.provider }, f.n);
      },
    });
    this.tokens = new Counter({
      name: 'pao_gateway_tokens_total',
      help: 'Tokens by model, provider, direction (prompt, completion) and allow-listed tags.',
      labelNames: [...tagged, 'direction'],
      registers: [this.registry],
      collect() {
        handOver(this, 'prompt', (c) => ({ ...c.labels, direction: 'prompt' }));
        handOver(this, 'completion', (c) => ({ ...c.labels, direction: 'completion' }));
      },
    });
    this.cost = new Counter({
      name: 'pao_gateway_cost_usd_total',
      help: 'List price of the tokens served, USD, by model, provider and allow-listed tags.',
      labelNames: tagged,
      registers: [this.registry],
      collect() {
        handOver(this, 'cost', (c) => c.labels);
      },
    });
    const spoolBytes = () => this.usageSpoolBytes();
    new Gauge({
      name: 'pao_gateway_usage_spool_bytes',
      help: "Bytes of usage records on local disk not yet in the usage store (with the open streams' provisional records).",
      registers: [this.registry],
      collect() {
        this.set(spoolBytes());
      },
    });
    const self = this;
    // Models are the deployed ones (bounded by the cluster), never what callers send.
    new Gauge({
      name: 'pao_gateway_model_in_flight',
      help: 'Requests this proxy has in flight on an in-cluster model (the autoscaler sums them over proxies; KEDA/HPA may too).',
      labelNames: ['model'],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const [model, l] of Object.entries(self.modelLoad())) this.set({ model }, l.inFlight);
      },
    });
    new Gauge({
      name: 'pao_gateway_model_queued',
      help: 'Requests this proxy holds for an in-cluster model: every replica slot busy, or the model waking from zero.',
      labelNames: ['model'],
      registers: [this.registry],
      collect() {
        this.reset();
        for (const [model, l] of Object.entries(self.modelLoad())) this.set({ model }, l.queued);
      },
    });
  }

  /**
   * Counts one finished request. The labelled children are looked up once per label set and
   * kept: prom-client validates and hashes a label object on every call otherwise, which showed
   * in the gateway's profile.
   */
  /** A request's or tool call's guardrail findings, counted by guardrail, category, action and place. */
  countFindings(findings: readonly Finding[]): void {
    for (const { guardrail, category, action, where, count } of findings)
      this.guardrailFindings.inc({ guardrail, category, action, where }, count);
  }

  observeRequest(o: RequestObservation): void {
    const tagLabels = this.tagLabels(o.tags, o.status < 400 && o.model !== '');
    const key = `${o.model}\u0000${o.provider}\u0000${o.status}\u0000${Object.values(tagLabels).join('\u0000')}`;
    let c = this.children.get(key);
    if (!c) {
      const labels = { model: o.model, provider: o.provider, ...tagLabels };
      c = {
        labels,
        statusLabels: { ...labels, status: String(o.status) },
        requests: 0,
        prompt: 0,
        completion: 0,
        cost: 0,
        latency: this.latency.labels({ model: o.model, provider: o.provider }),
        firstToken: this.firstToken.labels({ model: o.model, provider: o.provider }),
        perToken: this.perToken.labels({ model: o.model, provider: o.provider }),
      };
      this.children.set(key, c);
    }
    c.requests += 1;
    c.latency.observe(o.seconds);
    if (o.status < 400 && o.firstTokenSeconds !== undefined) {
      c.firstToken.observe(o.firstTokenSeconds);
      // As the GenAI conventions define it: the time after the first token, over the tokens after it.
      const after = (o.usage?.completionTokens ?? 0) - 1;
      if (after > 0) c.perToken.observe(Math.max(0, o.seconds - o.firstTokenSeconds) / after);
    }
    if (o.status >= 400)
      this.errors.inc({ model: o.model, provider: o.provider, status: String(o.status), code: o.code });
    // Figures an upstream reported: only counts (finite, not negative) add up.
    if (o.usage) {
      c.prompt += countOf(o.usage.promptTokens);
      c.completion += countOf(o.usage.completionTokens);
    }
    c.cost += countOf(o.costUsd);
  }

  /**
   * A routed request starts (models and providers are routable ones: bounded by the config).
   * Returns its count, which finished() takes back: a fallback may change the request's model.
   */
  started(model: string, provider: string): InFlight {
    const key = `${model}\u0000${provider}`;
    let f = this.inFlight.get(key);
    if (!f) {
      f = { model, provider, n: 0 };
      this.inFlight.set(key, f);
    }
    f.n++;
    return f;
  }

  finished(f: InFlight): void {
    f.n--;
  }

  /**
   * Process and Node.js runtime metrics (process_*, nodejs_*: CPU, memory, file descriptors,
   * event-loop lag, GC), under their standard names so stock dashboards read them. Once per
   * process: the collectors watch the event loop and the GC.
   */
  collectProcessMetrics(): void {
    collectDefaultMetrics({ register: this.registry });
  }

  /**
   * Label values of the allow-listed tag keys ('' where the request has no such tag). Values are
   * the callers' free text, so each key keeps at most `maxTagValues` distinct ones, and only a
   * request a model answered (`admit`) may claim a new one: a flood of refused requests with
   * made-up values cannot use up the slots of real teams. Values without a slot are reported as
   * `_other` (usage reports still have them exactly).
   */
  tagLabels(tags: Tag[], admit = true): Record<string, string> {
    const out: Record<string, string> = {};
    for (const [i, key] of this.tagKeys.entries()) {
      const value = tags.find((t) => t.key === key)?.value ?? '';
      const seen = this.seenValues[i];
      let label = value;
      if (value && seen && !seen.has(value)) {
        if (admit && seen.size < this.maxTagValues) seen.add(value);
        else label = OTHER;
      }
      out[this.tagLabelNames[i] ?? labelName(key)] = label;
    }
    return out;
  }
}
