import { daysToRetirement, lifecycleOf, RETIRING_SOON_DAYS, replacementOf } from '../../crds/catalog/lifecycle.js';
import type { BedrockPriceTable } from '../../crds/catalog/prices.js';
import type { ExternalProvider, ProviderType } from '../../crds/external-provider.js';
import type { Condition } from '../../crds/meta.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { resolveNames } from '../../crds/model-names.js';
import { PROVIDERS } from '../../crds/providers/table.js';
import { withOptionalCondition } from '../runtime/conditions.js';

/**
 * The ModelsRetiring condition: a resource that names a hosted model within RETIRING_SOON_DAYS of
 * its retirement (or past it) says which, when, and the replacement its provider gives, from the
 * lifecycle table (crds/catalog/lifecycle.ts) the proxy answers Deprecation headers from. A
 * RoutingPolicy's pool, an ExternalProvider's models, aliases and fallbacks, an ApiKey's
 * allow-list: the platform team hears it before the callers' requests start to fail. A resource
 * naming no such model carries no such condition.
 */

export const MODELS_RETIRING = 'ModelsRetiring';

/** A model name as a resource writes it, and the field it is in. */
export interface Naming {
  name: string;
  field: string;
}

/** What a name is resolved against: the resources serving models, and the table with the dates. */
export interface HostedWorld {
  deployments: readonly ModelDeployment[];
  providers: readonly ExternalProvider[];
  prices: BedrockPriceTable;
}

/** The provider and model id a gateway name reaches, aliases followed, where a provider serves it. */
function hostedTargets(world: HostedWorld): (name: string) => { provider: ProviderType; model: string } | undefined {
  const aliases = resolveNames(world.deployments, world.providers).aliases;
  return (name) => {
    const served = aliases.get(name) ?? name;
    const ep = world.providers.find((p) => p.spec.models.includes(served));
    if (!ep) return undefined;
    const found = ep.status?.models?.find((m) => m.id === served);
    return { provider: ep.spec.provider, model: PROVIDERS[ep.spec.provider].baseModel(ep.spec, served, found) };
  };
}

/** The condition for these namings now; undefined when none is within the window. */
export function retiringCondition(
  namings: readonly Naming[],
  world: HostedWorld,
  now: Date,
  generation: number,
): Omit<Condition, 'lastTransitionTime'> | undefined {
  const targetOf = hostedTargets(world);
  const notes = new Set<string>();
  let retired = false;
  for (const { name, field } of namings) {
    const target = targetOf(name);
    if (!target) continue;
    const lifecycle = lifecycleOf(world.prices, target.provider, target.model);
    const days = daysToRetirement(lifecycle, now.getTime());
    if (!lifecycle?.retires || days === undefined || days > RETIRING_SOON_DAYS) continue;
    retired ||= days <= 0;
    const to = replacementOf(world.prices, target.provider, target.model);
    const when =
      days <= 0
        ? `retired on ${lifecycle.retires}`
        : `retires on ${lifecycle.retires}, in ${days} day${days === 1 ? '' : 's'}`;
    notes.add(
      `${name} (${field}) ${when}: ${to ? `move to ${to}` : `${PROVIDERS[target.provider].label} names no replacement`}`,
    );
  }
  if (notes.size === 0) return undefined;
  return {
    type: MODELS_RETIRING,
    status: 'True',
    reason: retired ? 'ModelsRetired' : 'ModelsRetiring',
    message: `${[...notes].join('; ')}; requests to a retired model fail at its provider`,
    observedGeneration: generation,
  };
}

/** The conditions with ModelsRetiring set to `next`, or without it when `next` is undefined. */
export function withRetiringCondition(
  conditions: Condition[] | undefined,
  next: Omit<Condition, 'lastTransitionTime'> | undefined,
  now: Date,
): Condition[] | undefined {
  return withOptionalCondition(conditions, MODELS_RETIRING, next, now);
}

/** The Event to record when a resource starts to name a retiring model, or names another. */
export function retiringEvent(
  before: Condition[] | undefined,
  next: Omit<Condition, 'lastTransitionTime'> | undefined,
): { reason: string; message: string } | undefined {
  const was = before?.find((c) => c.type === MODELS_RETIRING);
  if (!next || (was?.status === 'True' && was.reason === next.reason && sameModels(was.message, next.message))) {
    return undefined;
  }
  return { reason: next.reason, message: next.message };
}

/** The messages name the same models (the day counts in them change daily, which is no news). */
const sameModels = (a: string, b: string) => a.replace(/, in \d+ days?/g, '') === b.replace(/, in \d+ days?/g, '');
