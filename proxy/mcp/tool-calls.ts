import { type Caller, rateBucketOf } from '../access/auth.js';
import type { RateLimit, RateLimiter } from '../access/rate-limit.js';
import type { Tag } from '../endpoints/tags.js';
import type { Finding } from '../guardrails/findings.js';
import type { ProxyMetrics } from '../telemetry/metrics.js';
import type { RequestTracer, ToolSpan } from '../telemetry/tracing.js';
import type { UsageRecord, UsageSink } from '../usage/record.js';
import { boundPayload } from '../usage/record-columns.js';
import { isObject, type JsonObject, RPC, type RpcAnswer } from './json-rpc.js';

/**
 * The governance of tools/call: the key's rate per tool (shared through Redis when the gateway
 * has it, like every other bucket), and what each call leaves behind: one usage record (server,
 * tool, key, team, tags, latency, status, bytes in and out; arguments and result only for keys
 * that opt in), the metrics, and a span after the GenAI semantic conventions' execute_tool.
 */

export interface ToolCallDeps {
  limiter: RateLimiter;
  /** The rate of keys that have no rate of their own. */
  rateLimit: RateLimit;
  metrics: ProxyMetrics;
  tracer?: RequestTracer;
  usage: UsageSink;
}

export interface ToolCall {
  requestId: string;
  caller: Caller;
  tags: Tag[];
  server: string;
  tool: string;
  /**
   * The server lists the tool (its McpServer's status, or a tools/list through the gateway): a
   * name a caller made up is recorded, counted and traced as "unknown" (servers answer one with
   * an error, or with an isError result), so invented names never grow the metrics' labels or
   * the reports' rows.
   */
  listed: boolean;
  callId: string | number;
  protocolVersion: string;
  header: (name: string) => string | undefined;
  bytesIn: number;
  /** The call's arguments (kept only for keys with recordPayloads). */
  arguments?: unknown;
}

/** What the caller got: its HTTP status as recorded (the JSON-RPC error mapped), bytes out, the answer. */
export interface ToolCallEnd {
  answer: RpcAnswer;
  bytesOut: number;
  stream: boolean;
  /** Why the gateway answered the error itself (timeout, unreachable...), if it did. */
  reason?: string;
  /** What the Guardrails found in the call's arguments and result (proxy/mcp/tool-guardrails.ts). */
  findings?: Finding[];
}

/** Record status of a gateway-made error, by its reason: what an HTTP call of the same fate would say. */
const STATUS_OF: Readonly<Record<string, number>> = {
  denied: 403,
  rate_limited: 429,
  timeout: 504,
  too_large: 502,
  unreachable: 502,
  closed: 502,
  refused: 502,
  session_gone: 404,
  // The caller cancelled or closed its request before the answer (as the model routes record it).
  cancelled: 499,
};

const UNKNOWN_TOOL = 'unknown';

const toolBucket = (caller: Caller, server: string, tool: string): string =>
  `mcp:${rateBucketOf(caller)}:${server}:${tool}`;

/** Whether the key may call the tool now; the seconds to wait when not. */
export async function admitToolCall(deps: ToolCallDeps, caller: Caller, server: string, tool: string): Promise<number> {
  const own = caller.policy.mcp?.toolRateLimit;
  const rate: RateLimit = own
    ? {
        requestsPerSecond: own.requestsPerSecond,
        burst: own.burst ?? Math.max(1, Math.ceil(2 * own.requestsPerSecond)),
      }
    : (caller.policy.rate ?? deps.rateLimit);
  if (rate.requestsPerSecond <= 0) return 0;
  const verdict = await deps.limiter.admit(toolBucket(caller, server, tool), { requests: rate });
  if (verdict.ok) return 0;
  deps.metrics.rateLimited.inc();
  return verdict.retryAfterSeconds;
}

/** Starts the span of a call; the returned function records it all when the answer is out. */
export function beginToolCall(deps: ToolCallDeps, call: ToolCall): (end: ToolCallEnd) => void {
  const started = performance.now();
  const span: ToolSpan | undefined = deps.tracer?.tool?.({
    tool: call.listed ? call.tool : UNKNOWN_TOOL,
    server: call.server,
    callId: String(call.callId),
    protocolVersion: call.protocolVersion,
    header: call.header,
    requestId: call.requestId,
  });
  return (end) => {
    const latencyMs = performance.now() - started;
    const { status, errorType } = outcomeOf(end);
    const tool = call.listed ? call.tool : UNKNOWN_TOOL;
    const rec: UsageRecord = {
      time: new Date().toISOString(),
      requestId: call.requestId,
      keyHashPrefix: call.caller.keyHashPrefix,
      team: call.caller.policy.team,
      ...(call.caller.policy.name ? { apiKey: call.caller.policy.name } : {}),
      model: tool,
      endpoint: 'mcp',
      provider: call.server,
      tags: call.tags,
      promptTokens: 0,
      completionTokens: 0,
      costUsd: 0,
      savingsUsd: 0,
      latencyMs: Math.round(latencyMs),
      status,
      ...(errorType ? { errorType } : {}),
      stream: end.stream,
      bytesIn: call.bytesIn,
      bytesOut: end.bytesOut,
      ...(call.caller.policy.mcp?.recordPayloads ? { payload: payloadOf(call.arguments, end.answer) } : {}),
      ...(end.findings?.length ? { findings: end.findings } : {}),
    };
    deps.usage.record(rec);
    deps.metrics.countFindings(end.findings ?? []);
    deps.metrics.mcpToolCalls.inc({ server: call.server, tool, status: String(status) });
    deps.metrics.mcpToolLatency.observe({ server: call.server }, latencyMs / 1000);
    span?.end({ status, ...(errorType ? { errorType } : {}) });
  };
}

function outcomeOf(end: ToolCallEnd): { status: number; errorType?: string } {
  const a = end.answer;
  // Refused by a Guardrail: answered as a tool error, so the agent's model reads why.
  if (end.reason === 'guardrail_blocked') return { status: 400, errorType: 'guardrail_blocked' };
  if ('error' in a) {
    const status = STATUS_OF[end.reason ?? ''] ?? (a.error.code === RPC.invalidParams ? 400 : 502);
    return { status, errorType: end.reason ?? rpcErrorName(a.error.code) };
  }
  // A tool that ran and reported its own failure: the call worked, the tool did not.
  return isObject(a.result) && a.result.isError === true ? { status: 200, errorType: 'tool_error' } : { status: 200 };
}

const rpcErrorName = (code: number): string =>
  (
    ({
      [RPC.invalidParams]: 'invalid_params',
      [RPC.methodNotFound]: 'method_not_found',
      [RPC.internalError]: 'internal_error',
      [RPC.requestTimeout]: 'timeout',
    }) as Record<number, string>
  )[code] ?? 'server_error';

function payloadOf(args: unknown, answer: RpcAnswer): string {
  const text = JSON.stringify({
    arguments: args ?? null,
    ...('result' in answer ? { result: answer.result as JsonObject } : { error: answer.error }),
  });
  return boundPayload(text);
}
