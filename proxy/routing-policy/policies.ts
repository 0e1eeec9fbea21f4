import { createHash } from 'node:crypto';
import {
  CASCADE_TRIGGERS,
  type CascadeTrigger,
  type RoutingObjective,
  type RoutingPolicy,
  type SemanticScorer,
} from '../../crds/routing-policy.js';
import type { RouteEntry, RouteTable } from '../routing/routes.js';
import { type Backends, backendOf } from '../upstreams/backend.js';
import type { PoolModel } from './decide.js';
import { DEFAULT_THRESHOLDS } from './scorer.js';
import { DEFAULT_NEIGHBOURS, DEFAULT_SEMANTIC_WEIGHT, ExampleIndex } from './semantic.js';

/** Embeds texts with a model the gateway routes (the OpenAI embeddings dialect); one vector per text. */
export type Embedder = (model: string, texts: readonly string[], signal?: AbortSignal) => Promise<Float32Array[]>;

/**
 * The RoutingPolicies as the gateway applies them: each policy's settings with their defaults,
 * and its pool resolved against the route table (price from the one price table, abilities from
 * the model facts the model lists show). Pools are resolved again whenever the policies or the
 * routes change, off the request path; a request reads the last resolved snapshot and asks the
 * route table only whether a model takes traffic now.
 */

export interface ResolvedPolicy {
  name: string;
  objective: RoutingObjective;
  enabled: boolean;
  thresholds: { standard: number; frontier: number };
  /** Models of the pool that route, in the policy's order. */
  pool: readonly PoolModel[];
  cascade: { max: number; triggers: ReadonlySet<CascadeTrigger> };
  baseline?: string;
  /** The semantic scorer, once its examples are embedded (absent until then, or when they could not be). */
  semantic?: { embeddingModel: string; neighbours: number; weight: number; index: ExampleIndex };
}

/** Whether a route takes a request now: not deploying, not asleep at zero replicas (waking would hold the request). */
export function takesTraffic(entry: RouteEntry | undefined): boolean {
  if (!entry || entry.kind === 'unavailable') return false;
  if (entry.kind === 'in-cluster') {
    if (entry.replicas && entry.replicas.length === 0) return false;
    if (entry.scaling && entry.scaling.replicas === 0) return false;
  }
  return true;
}

export class RoutingPolicies {
  private policies: RoutingPolicy[] = [];
  private resolved = new Map<string, ResolvedPolicy>();
  private generation = 0;
  private settled: Promise<void> = Promise.resolve();
  /** Embedded examples by their content's digest: a route change does not embed them again. */
  private indexes = new Map<string, { index?: ExampleIndex }>();

  constructor(
    private readonly routes: RouteTable,
    private readonly backends: Backends,
    private readonly onError: (err: unknown) => void = () => {},
    private readonly embed?: Embedder,
  ) {
    routes.onChange(() => this.resolve());
  }

  /** Replaces the policies (the source's list, now and on every change). */
  set(policies: RoutingPolicy[]): void {
    this.policies = policies;
    this.resolve();
  }

  get(name: string): ResolvedPolicy | undefined {
    return this.resolved.get(name);
  }

  list(): ResolvedPolicy[] {
    return [...this.resolved.values()];
  }

  /** Resolves once the last change is applied (tests, start-up). */
  ready(): Promise<void> {
    return this.settled;
  }

  private resolve(): void {
    const generation = ++this.generation;
    const policies = this.policies;
    this.settled = Promise.all(policies.map((p) => this.resolveOne(p)))
      .then((list) => {
        // A later change may have resolved already: only the newest result is kept.
        if (generation !== this.generation) return;
        this.resolved = new Map(list.map((p) => [p.name, p]));
      })
      .catch((err: unknown) => this.onError(err));
  }

  private async resolveOne(p: RoutingPolicy): Promise<ResolvedPolicy> {
    const spec = p.spec;
    const objective = spec.objective ?? 'Balanced';
    const defaults = DEFAULT_THRESHOLDS[objective];
    const pool: PoolModel[] = [];
    for (const m of spec.models) {
      const entry = this.routes.lookup(m.name);
      if (!entry || entry.kind === 'unavailable') continue;
      const backend = backendOf(this.backends, entry);
      const facts = await backend.facts(entry).catch(() => undefined);
      const price = backend.price(entry);
      pool.push({
        name: m.name,
        tier: m.tier,
        ...(price ? { price } : {}),
        inCluster: entry.kind === 'in-cluster',
        ...(facts?.contextWindow ? { contextWindow: facts.contextWindow } : {}),
        // Unknown abilities count as present: a constraint rules a model out only on what is known of it.
        tools: facts?.unknown?.includes('tools') || (facts?.tools ?? true),
        images: facts?.unknown?.includes('images') || (facts?.images ?? true),
        reasoning: facts?.unknown?.includes('reasoning') || (facts?.reasoning ?? true),
      });
    }
    const semantic = spec.scorer?.semantic;
    const index = semantic ? this.indexOf(semantic) : undefined;
    return {
      name: p.metadata.name ?? '',
      objective,
      enabled: spec.enabled === true,
      thresholds: {
        standard: spec.scorer?.thresholds?.standard ?? defaults.standard,
        frontier: spec.scorer?.thresholds?.frontier ?? defaults.frontier,
      },
      pool,
      cascade: {
        max: spec.cascade?.maxEscalations ?? 1,
        triggers: new Set(spec.cascade?.triggers ?? CASCADE_TRIGGERS),
      },
      ...(spec.baseline ? { baseline: spec.baseline } : {}),
      ...(semantic && index
        ? {
            semantic: {
              embeddingModel: semantic.embeddingModel,
              neighbours: semantic.neighbours ?? DEFAULT_NEIGHBOURS,
              weight: semantic.weight ?? DEFAULT_SEMANTIC_WEIGHT,
              index,
            },
          }
        : {}),
    };
  }

  /**
   * The examples' index once they are embedded; until then undefined (the features alone score),
   * the embedding started in the background and the policies resolved again when it is done. A
   * failure is told and tried again on the next change.
   */
  private indexOf(semantic: SemanticScorer): ExampleIndex | undefined {
    const examples = semantic.examples ?? [];
    if (!this.embed || examples.length === 0) return undefined;
    const digest = createHash('sha256')
      .update(JSON.stringify([semantic.embeddingModel, examples]))
      .digest('hex');
    const known = this.indexes.get(digest);
    if (known) return known.index;
    if (this.indexes.size >= MAX_INDEXES) this.indexes.clear();
    const slot: { index?: ExampleIndex } = {};
    this.indexes.set(digest, slot);
    this.embed(
      semantic.embeddingModel,
      examples.map((e) => e.prompt),
      AbortSignal.timeout(EMBED_TIMEOUT_MS),
    ).then(
      (vectors) => {
        slot.index = new ExampleIndex(
          examples.map((e, i) => ({ tier: e.tier, vector: vectors[i] ?? new Float32Array() })),
        );
        this.resolve();
      },
      (err: unknown) => {
        this.indexes.delete(digest);
        this.onError(err);
      },
    );
    return undefined;
  }
}

const EMBED_TIMEOUT_MS = 60_000;
const MAX_INDEXES = 64;
