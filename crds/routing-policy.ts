import type { CommonStatus, Resource } from './meta.js';

/**
 * A RoutingPolicy: a pool of models the gateway may send a request to instead of the one it
 * names, an objective, a scorer that estimates how hard a request is, and a cascade that moves a
 * failed answer up the pool (proxy/routing-policy/). The policy named `default`
 * (DEFAULT_ROUTING_POLICY) serves `model: "auto"`; another serves `<name>/auto`. The schema is
 * crds/ai.platform_routingpolicies.yaml.
 */

/**
 * How capable a model of the pool is, cheapest tier first: the scorer's estimate of a request
 * picks the lowest tier that serves it, and the cheapest model of that tier (or above) that meets
 * the request's hard constraints serves it.
 */
export const ROUTING_TIERS = ['Light', 'Standard', 'Frontier'] as const;
export type RoutingTier = (typeof ROUTING_TIERS)[number];

/** Cost: keep all but clearly hard requests on cheap models; Quality: move up at the first sign of difficulty. */
export type RoutingObjective = 'Cost' | 'Balanced' | 'Quality';

/** What makes the cascade move an answer to the next model. */
export const CASCADE_TRIGGERS = ['Error', 'Empty', 'Length', 'Refusal', 'InvalidJson', 'UnknownTool'] as const;
export type CascadeTrigger = (typeof CASCADE_TRIGGERS)[number];

export interface RoutingPolicyModel {
  /** The model as callers name it (an in-cluster model, a provider's model, an alias). */
  name: string;
  tier: RoutingTier;
}

/** Difficulty scores (0..1) from which a request needs Standard and Frontier; the objective's defaults where absent. */
interface RoutingThresholds {
  standard?: number;
  frontier?: number;
}

/** One labelled example for the policy's classifier: a prompt and the lowest tier that answers it well. */
export interface RoutingExample {
  tier: RoutingTier;
  prompt: string;
}

/** Retrains the policy's classifier on the bank plus these examples, in this embedding model's space. */
export interface SemanticScorer {
  /** An embedding model the gateway routes (its OpenAI embeddings endpoint embeds the bank, examples and prompts); absent: the built-in embedding. */
  embeddingModel?: string;
  /** Examples kept in the policy. */
  examples?: RoutingExample[];
  /** More examples from a ConfigMap in platform-agent: a YAML list of {tier, prompt} under `key`. */
  examplesFrom?: { configMapName: string; key: string };
  /** Ignored (the neighbours' vote this set is gone); kept so that existing manifests apply. */
  neighbours?: number;
  /** Ignored, as neighbours. */
  weight?: number;
}

interface RoutingScorer {
  thresholds?: RoutingThresholds;
  semantic?: SemanticScorer;
}

interface RoutingCascade {
  /** Models tried after the first, at most; default 1, 0 turns the cascade off. */
  maxEscalations?: number;
  /** Default: every trigger. (Not `on`: YAML 1.1, which kubectl reads, makes a bare `on` the boolean true.) */
  triggers?: CascadeTrigger[];
}

export interface RoutingPolicySpec {
  models: RoutingPolicyModel[];
  /** Default Balanced. */
  objective?: RoutingObjective;
  /**
   * The `default` policy only: route requests that name a model too (to that model or a cheaper
   * one of the pool that serves the request as well), for every key whose `routing` is Inherit.
   * Default false: only `model: "auto"` is routed.
   */
  enabled?: boolean;
  scorer?: RoutingScorer;
  cascade?: RoutingCascade;
  /**
   * The model savings of `auto` requests are counted against (what they would have cost there);
   * default the pool's most expensive Frontier model.
   */
  baseline?: string;
}

export interface RoutingPolicyStatus extends CommonStatus {
  /** The pool as the gateway resolves it: each model's price and abilities, or why it is left out. */
  models?: Array<{
    name: string;
    tier: RoutingTier;
    /** USD per 1M input and output tokens. */
    inputPerMillion?: number;
    outputPerMillion?: number;
    contextWindow?: number;
    /** Why the model is not routed to (not found, not priced). */
    problem?: string;
  }>;
}

export type RoutingPolicy = Resource<'RoutingPolicy', RoutingPolicySpec, RoutingPolicyStatus>;
