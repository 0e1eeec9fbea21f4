import { ProxyError } from '../endpoints/errors.js';
import type { Attempt } from '../exchange.js';
import type { RequestSpan } from '../telemetry/tracing.js';
import type { Translation } from '../translators/translator.js';
import { type Backends, backendOf, type Server } from './backend.js';
import type { UpstreamCall, UpstreamResult } from './upstream.js';

/**
 * The last step of a call (proxy/call.ts callOne: plan, fan-out, retries, send): one call to one
 * route as its plan says, the body translated to the upstream's dialect and the answer back to
 * the caller's, in a CLIENT span when tracing is on. `sender` begins the translation once and
 * answers the send, which the retries repeat as it is.
 */

type Call = Omit<UpstreamCall, 'route' | 'dialect'>;

export function sender(
  backends: Backends,
  { route, plan }: Attempt,
  call: Call,
  span: RequestSpan | undefined,
): () => Promise<UpstreamResult> {
  if (plan instanceof ProxyError) throw plan;
  const backend = backendOf(backends, route);
  const served = { id: route.model, base: backend.baseModel?.(route) ?? route.model };
  const translation = plan.translator?.begin(call.body, call.stream, served);
  if (translation instanceof ProxyError) throw translation;
  const sent: UpstreamCall = {
    ...call,
    route,
    dialect: plan.dialect,
    ...(translation ? { body: translation.body } : {}),
    ...(translation?.wantsUsage ? { clientWantsUsage: true } : {}),
  };
  const send = async (c: UpstreamCall): Promise<UpstreamResult> => {
    const result = await backend.send(c);
    return translation ? translated(result, translation) : result;
  };
  return span ? () => traced(span, backend.who(route), sent, send) : () => send(sent);
}

/** The upstream's answer in the caller's dialect. */
function translated(result: UpstreamResult, translation: Translation): UpstreamResult {
  if (result.kind === 'json') {
    const { raw: _raw, ...rest } = result;
    return { ...rest, body: translation.json(result.body) };
  }
  return { ...result, body: translation.stream(result.body, result.outcome) };
}

/**
 * One upstream call in a CLIENT span, the span's trace context in the call's headers; the span
 * ends with the answer (a stream, when its last byte went out) or the error.
 */
async function traced(
  span: RequestSpan,
  who: Server,
  call: UpstreamCall,
  send: (call: UpstreamCall) => Promise<UpstreamResult>,
): Promise<UpstreamResult> {
  const up = span.upstream({
    model: call.route.model,
    provider: call.route.provider,
    ...(who.system ? { system: who.system } : {}),
    ...(who.address ? { address: who.address } : {}),
  });
  let result: UpstreamResult;
  try {
    result = await send({ ...call, headers: up.headers });
  } catch (err) {
    up.end(
      err instanceof ProxyError ? { code: err.code, status: err.status } : { code: 'internal_error', status: 500 },
    );
    throw err;
  }
  if (result.kind === 'json') up.end();
  else
    result.outcome.then(
      (o) => up.end(o.error ? { code: o.error.code, status: o.error.status } : undefined),
      () => up.end({ code: 'internal_error', status: 500 }),
    );
  return result;
}
