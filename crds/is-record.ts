/** A JSON object: not null, not an array. The one definition every reader of untyped JSON uses. */
export function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}
