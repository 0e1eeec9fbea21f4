import { type Condition, rfc3339 } from '../../crds/meta.js';

/**
 * Sets a condition in a list the way apimachinery's meta.SetStatusCondition does: the
 * transition time changes only when the status does. Returns a new list.
 */
export function setCondition(
  conditions: Condition[] | undefined,
  next: Omit<Condition, 'lastTransitionTime'>,
  now: Date,
): Condition[] {
  const list = conditions ? [...conditions] : [];
  const i = list.findIndex((c) => c.type === next.type);
  const previous = i >= 0 ? list[i] : undefined;
  const lastTransitionTime = previous && previous.status === next.status ? previous.lastTransitionTime : rfc3339(now);
  const condition: Condition = { ...next, lastTransitionTime };
  if (i >= 0) list[i] = condition;
  else list.push(condition);
  return list;
}

/**
 * The conditions with the one of `type` set to `next`, or without it when `next` is undefined: a
 * condition a resource carries only while it has something to say (AliasesAccepted, ModelsRetiring).
 */
export function withOptionalCondition(
  conditions: Condition[] | undefined,
  type: string,
  next: Omit<Condition, 'lastTransitionTime'> | undefined,
  now: Date,
): Condition[] | undefined {
  if (next) return setCondition(conditions, next, now);
  return conditions?.some((c) => c.type === type) ? conditions.filter((c) => c.type !== type) : conditions;
}

export function findCondition(conditions: Condition[] | undefined, type: string): Condition | undefined {
  return conditions?.find((c) => c.type === type);
}
