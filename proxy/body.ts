import { BODY_MEMORY_FACTOR, bodyNeverFits, type Reservation } from './access/memory-budget.js';
import { MAX_JSON_VALUES, MAX_NESTING } from './endpoints/chat-request.js';
import { invalidRequest, ProxyError } from './endpoints/errors.js';
import { checkJsonShape } from './endpoints/json-shape.js';
import type { Admitted, DoorIncoming, Failed, Read } from './exchange.js';

/**
 * The second stage: the body, read to its end within the size limit while the memory it costs
 * grows its reservation (a replica over its memory budget refuses with 503 rather than dying; a
 * body that could never fit it is a 413),
 * then its JSON, judged by its shape before JSON.parse builds anything of it. A refused request
 * is recorded under the model its body asked for, whatever else is wrong with it.
 */

export interface BodyDeps {
  maxBodyBytes: number;
}

export const MAX_BODY_BYTES = 10 * 1024 * 1024;

/**
 * The body of a request at any door: read within the limit while its reservation grows, its JSON
 * judged by its shape before it is parsed. A refusal is the ProxyError.
 */
export async function readDoorBody(
  deps: BodyDeps,
  door: Pick<DoorIncoming, 'body'>,
  reservation: Reservation,
): Promise<{ body: unknown; bytes: number } | ProxyError> {
  let text: string;
  try {
    text = await door.body(deps.maxBodyBytes, (size) => reservation.atLeast(size * BODY_MEMORY_FACTOR, bodyNeverFits));
  } catch (err) {
    if (err instanceof ProxyError) return err;
    throw err;
  }
  const body = parseJsonBody(text);
  return body instanceof ProxyError ? body : { body, bytes: Buffer.byteLength(text) };
}

/** The second stage of a model endpoint's request; a refusal is recorded under the model its body asked for. */
export async function readBody(deps: BodyDeps, admitted: Admitted): Promise<Read | Failed> {
  const read = await readDoorBody(deps, admitted.incoming, admitted.reservation);
  if (read instanceof ProxyError) return { failed: read, at: admitted };
  const asked = (read.body as { model?: unknown } | null)?.model;
  return typeof asked === 'string'
    ? { ...admitted, ...read, known: { ...admitted.known, model: asked } }
    : { ...admitted, ...read };
}

/**
 * A request body's JSON, its shape judged from the text before JSON.parse builds anything of it
 * (nesting and value count bounded, so no body costs more than a small multiple of its size).
 */
function parseJsonBody(text: string): unknown {
  const shape = checkJsonShape(text, { maxDepth: MAX_NESTING, maxValues: MAX_JSON_VALUES });
  if (shape) return shape;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return invalidRequest('the request body is not valid JSON', null, 'invalid_json');
  }
}
