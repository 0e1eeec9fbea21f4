import { type Catalog, catalogModel, parallelSlots, pricing } from '../../crds/catalog/catalog.js';
import type { BedrockPriceTable, TokenPrice } from '../../crds/catalog/prices.js';
import { LLMS_NAMESPACE, PRICES_CONFIGMAP, ROUTING_EXAMPLES_LABEL } from '../../crds/constants.js';
import type { ExternalProvider } from '../../crds/external-provider.js';
import type { Condition } from '../../crds/meta.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { resolveNames } from '../../crds/model-names.js';
import { PROVIDERS } from '../../crds/providers/table.js';
import type { RoutingPolicy, RoutingPolicyModel, RoutingPolicyStatus } from '../../crds/routing-policy.js';
import { type Naming, retiringCondition, withRetiringCondition } from '../lifecycle/models-retiring.js';
import { setCondition } from '../runtime/conditions.js';

/**
 * A RoutingPolicy's status as a pure function of what serves models in the cluster: each model of
 * the pool resolved (through aliases) to the ModelDeployment or ExternalProvider that serves it,
 * priced as the proxy prices it (in-cluster models from the catalog's GPU-hours and throughput,
 * providers' from the price table), and one Ready condition naming what to fix.
 */

/** What the pool is resolved against. */
export interface ServingWorld {
  deployments: readonly ModelDeployment[];
  providers: readonly ExternalProvider[];
  prices: BedrockPriceTable;
  catalog: Catalog;
  /** The data of a ConfigMap labelled for routing examples, by name; undefined when there is none. */
  examples: (configMapName: string) => Readonly<Record<string, string>> | undefined;
  /** Whether the proxies run with the scorer's built-in embedding (Helm value routing.builtInEmbedding). */
  builtInEmbedding: boolean;
}

type PoolModel = NonNullable<RoutingPolicyStatus['models']>[number];

export const NOT_SERVED = 'no ModelDeployment or ExternalProvider serves it';
export const NOT_PRICED = 'no price';

/** What serves a name in-cluster: a ModelDeployment of platform-llms, the only namespace the operator deploys to. */
function inCluster(served: string, world: ServingWorld): Omit<PoolModel, 'name' | 'tier'> | undefined {
  const md = world.deployments.find((d) => d.metadata.namespace === LLMS_NAMESPACE && d.spec.model === served);
  if (!md) return undefined;
  const known = catalogModel(world.catalog, md.spec.model, md.spec.engine);
  const contextWindow = md.spec.server?.contextLength ?? known?.serving.contextLength;
  const window = contextWindow ? { contextWindow } : {};
  if (!known) return { ...window, problem: NOT_PRICED };
  // The proxy's PriceBook.catalogPrice: GPU-hours on the recommended type at the server's slots.
  const per1M = pricing(world.catalog, known, known.gpu.recommended, parallelSlots(world.catalog, md)).usdPer1MTokens;
  return { inputPerMillion: per1M, outputPerMillion: per1M, ...window };
}

/** What serves a name at a provider: the first ExternalProvider selecting it, priced by its module. */
function atProvider(served: string, world: ServingWorld): Omit<PoolModel, 'name' | 'tier'> | undefined {
  const ep = world.providers.find((p) => p.spec.models.includes(served));
  if (!ep) return undefined;
  const module = PROVIDERS[ep.spec.provider];
  const found = ep.status?.models?.find((m) => m.id === served);
  // Only a discovered model has a target, which the module's facts (its context window) need.
  const target = module.target(ep, served, { standalone: false, env: {} });
  const baseModel = target?.baseModel ?? module.baseModel(ep.spec, served, found);
  const price: TokenPrice | undefined = module.price(world.prices, ep.spec, served, baseModel);
  const contextWindow = target ? module.facts(served, baseModel, target.target).contextWindow : undefined;
  return {
    ...(price ? { inputPerMillion: price.input, outputPerMillion: price.output } : { problem: NOT_PRICED }),
    ...(contextWindow ? { contextWindow } : {}),
  };
}

/** Each model of the pool as the gateway will see it, in the spec's order. */
function resolvePool(models: readonly RoutingPolicyModel[], world: ServingWorld): PoolModel[] {
  const aliases = resolveNames(world.deployments, world.providers).aliases;
  return models.map((m) => {
    const served = aliases.get(m.name) ?? m.name;
    const resolved = inCluster(served, world) ?? atProvider(served, world) ?? { problem: NOT_SERVED };
    return { name: m.name, tier: m.tier, ...resolved };
  });
}

/** Why examplesFrom gives no examples, if it does not. */
function examplesProblem(policy: RoutingPolicy, world: ServingWorld): string | undefined {
  const from = policy.spec.scorer?.semantic?.examplesFrom;
  if (!from) return undefined;
  const data = world.examples(from.configMapName);
  if (!data) {
    return `spec.scorer.semantic.examplesFrom names ConfigMap ${from.configMapName}, which is not in namespace ${policy.metadata.namespace} with the label ${ROUTING_EXAMPLES_LABEL}: "true": create or label it`;
  }
  if (data[from.key] === undefined) {
    return `ConfigMap ${from.configMapName} has no key ${from.key} (spec.scorer.semantic.examplesFrom.key): add the YAML list of {tier, prompt} under it`;
  }
  return undefined;
}

/**
 * Why the policy's embedding model cannot embed, if it cannot: nothing serves it. The gateway then
 * scores with the built-in embedding (and the shipped classifier) until it is served.
 */
function embeddingProblem(policy: RoutingPolicy, world: ServingWorld): string | undefined {
  const model = policy.spec.scorer?.semantic?.embeddingModel;
  if (model === undefined) return undefined;
  const served = resolvePool([{ name: model, tier: 'Light' }], world)[0];
  if (served?.problem !== NOT_SERVED) return undefined;
  const meanwhile = world.builtInEmbedding
    ? 'with the built-in embedding and the shipped classifier'
    : 'on measured features only (the built-in embedding is off)';
  return `no ModelDeployment or ExternalProvider serves the embedding model ${model} (spec.scorer.semantic.embeddingModel): requests are scored ${meanwhile} until it is served; deploy it, or remove the field`;
}

/**
 * The Scorer condition: what judges a request's difficulty. False (FeaturesOnly) when no embedding
 * is at hand: the proxies run without the built-in one and no served model embeds, so requests are
 * scored on the measured features and their shape alone.
 */
function scorerCondition(policy: RoutingPolicy, world: ServingWorld, embedding: string | undefined) {
  const model = policy.spec.scorer?.semantic?.embeddingModel;
  if (model !== undefined && !embedding) {
    return {
      status: 'True' as const,
      reason: 'EmbeddingModel',
      message: `requests are scored by a classifier trained in the embedding space of ${model}, with the built-in or measured-features classifier while it does not answer`,
    };
  }
  const waiting = model !== undefined ? ` until ${model} is served` : '';
  if (world.builtInEmbedding) {
    return {
      status: 'True' as const,
      reason: 'BuiltInEmbedding',
      message: `requests are scored by the learned classifier over the built-in embedding${waiting}`,
    };
  }
  const why = model !== undefined ? `nothing serves ${model}` : 'spec.scorer.semantic.embeddingModel is not set';
  return {
    status: 'False' as const,
    reason: 'FeaturesOnly',
    message: `the proxies run without the built-in embedding (Helm value routing.builtInEmbedding: false) and ${why}: requests are scored on measured features (code, notation, length) and their shape only, which under-routes more often (docs/concepts/routing-policies.md); set spec.scorer.semantic.embeddingModel to an embedding model the gateway routes, or set routing.builtInEmbedding: true`,
  };
}

const names = (pool: PoolModel[], problem: string) => pool.filter((m) => m.problem === problem).map((m) => m.name);

/** The Ready condition: the first problem's reason, every problem in the message. */
function readyCondition(policy: RoutingPolicy, pool: PoolModel[], world: ServingWorld, embedding: string | undefined) {
  const missing = names(pool, NOT_SERVED);
  const unpriced = names(pool, NOT_PRICED);
  const examples = examplesProblem(policy, world);
  const problems: Array<[string, string]> = [];
  if (missing.length > 0) {
    problems.push([
      'ModelsMissing',
      `no ModelDeployment or ExternalProvider serves ${missing.join(', ')}: deploy them (ModelDeployment in ${LLMS_NAMESPACE}), select them in an ExternalProvider's spec.models, or remove them from spec.models`,
    ]);
  }
  if (unpriced.length > 0) {
    problems.push([
      'ModelsUnpriced',
      `no price for ${unpriced.join(', ')}, so routing compares a hosted one as dearer than every priced model and an in-cluster one as free: add a provider's model to the ConfigMap ${PRICES_CONFIGMAP}; an in-cluster model is priced only when the catalog knows it`,
    ]);
  }
  if (examples) problems.push(['ExamplesMissing', examples]);
  if (embedding) problems.push(['EmbeddingModelMissing', embedding]);
  const first = problems[0];
  if (!first) {
    return {
      status: 'True' as const,
      reason: 'Resolved',
      message: `every model of the pool is served and priced (${pool.length})`,
    };
  }
  return { status: 'False' as const, reason: first[0], message: problems.map(([, m]) => m).join('; ') };
}

/** The models a policy names: its pool, and the embedding model its scorer asks. */
function namings(policy: RoutingPolicy): Naming[] {
  const embedding = policy.spec.scorer?.semantic?.embeddingModel;
  return [
    ...policy.spec.models.map((m) => ({ name: m.name, field: 'spec.models' })),
    ...(embedding ? [{ name: embedding, field: 'spec.scorer.semantic.embeddingModel' }] : []),
  ];
}

/** The status to write: the resolved pool, observedGeneration and Ready (its transition time kept while it holds). */
export function routingPolicyStatus(policy: RoutingPolicy, world: ServingWorld, now: Date): RoutingPolicyStatus {
  const generation = policy.metadata.generation ?? 0;
  const pool = resolvePool(policy.spec.models, world);
  // Why the named embedding model cannot embed: read by both conditions.
  const embedding = embeddingProblem(policy, world);
  const ready: Omit<Condition, 'lastTransitionTime'> = {
    type: 'Ready',
    ...readyCondition(policy, pool, world, embedding),
    observedGeneration: generation,
  };
  const scorer = { type: 'Scorer', ...scorerCondition(policy, world, embedding), observedGeneration: generation };
  const conditions = setCondition(setCondition(policy.status?.conditions, ready, now), scorer, now);
  return {
    models: pool,
    observedGeneration: generation,
    conditions: withRetiringCondition(conditions, retiringCondition(namings(policy), world, now, generation), now),
  };
}
