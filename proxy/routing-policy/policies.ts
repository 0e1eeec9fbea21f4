import { createHash } from 'node:crypto';
import {
  CASCADE_TRIGGERS,
  type CascadeTrigger,
  type RoutingObjective,
  type RoutingPolicy,
  type SemanticScorer,
} from '../../crds/routing-policy.js';
import type { RouteEntry, RouteTable } from '../serving/routes.js';
import { type Backends, backendOf } from '../upstreams/backend.js';
import type { PoolModel } from './decide.js';
import { sampledBank } from './learned/bank.js';
import { builtInEmbedding } from './learned/static-embedding.js';
import {
  builtInScorer,
  ClassifierScorer,
  embeddingInput,
  featuresOnlyScorer,
  type TextScorer,
} from './learned/text-scorer.js';
import { embedRows, exampleRows, fitScorer, trainingSet } from './learned/train.js';
import { DEFAULT_THRESHOLDS } from './scorer.js';

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
  /**
   * The text scorer: the shipped classifier over the built-in embedding, or one trained for this
   * policy (its examples, its embedding model) once it is; `embeddingModel` when prompts are
   * embedded by a model the gateway routes; `fallback` scores when that model does not answer.
   */
  scorer: { text: TextScorer; embeddingModel?: string; fallback: TextScorer };
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
  /** Classifiers trained for policies, by their inputs' digest: a route change does not train again. */
  private trained = new Map<string, { scorer?: TextScorer }>();

  constructor(
    private readonly routes: RouteTable,
    private readonly backends: Backends,
    private readonly onError: (err: unknown) => void = () => {},
    private readonly embed?: Embedder,
    /** Off (Helm value routing.builtInEmbedding: false): no embedding table in memory, features only unless a policy names a model. */
    private readonly builtIn = true,
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
      scorer: semantic ? this.scorerOf(semantic) : this.shipped(),
    };
  }

  /**
   * A policy's own classifier, trained on the bank and its examples, in its embedding model's
   * space (a model the gateway routes) or the built-in one. Until it is trained, and when it
   * cannot be (the model does not answer), the shipped classifier scores: the training runs in
   * the background, in turns of the event loop, and the policies are resolved again when it is
   * done. A failure is told and tried again on the next change.
   */
  private scorerOf(semantic: SemanticScorer): ResolvedPolicy['scorer'] {
    const fallback = this.shipped();
    const examples = semantic.examples ?? [];
    const model = semantic.embeddingModel;
    // Examples alone are learned in the built-in embedding's space.
    if (model === undefined && (examples.length === 0 || !this.builtIn)) return fallback;
    if (model !== undefined && !this.embed) return fallback;
    const digest = createHash('sha256')
      .update(JSON.stringify([model ?? '', examples]))
      .digest('hex');
    const known = this.trained.get(digest);
    const ready = (scorer: TextScorer | undefined) =>
      scorer ? { ...fallback, text: scorer, ...(model !== undefined ? { embeddingModel: model } : {}) } : fallback;
    if (known) return ready(known.scorer);
    if (this.trained.size >= MAX_TRAINED) this.trained.clear();
    const slot: { scorer?: TextScorer } = {};
    this.trained.set(digest, slot);
    this.train(model, examples).then(
      (scorer) => {
        slot.scorer = scorer;
        this.resolve();
      },
      (err: unknown) => {
        this.trained.delete(digest);
        this.onError(err);
      },
    );
    return fallback;
  }

  /** The shipped classifier: over the built-in embedding, or over the measured features when that is off. */
  private shipped(): ResolvedPolicy['scorer'] {
    const text = this.builtIn ? builtInScorer(this.onError) : featuresOnlyScorer();
    return { text, fallback: text };
  }

  private async train(
    model: string | undefined,
    examples: NonNullable<SemanticScorer['examples']>,
  ): Promise<TextScorer> {
    if (model === undefined) {
      const rows = trainingSet(examples);
      const embedding = builtInEmbedding();
      const weights = await fitScorer(rows, await embedRows(rows, embedding));
      return new ClassifierScorer({ ...weights, embedding: embedding.name }, embedding);
    }
    // A routed model embeds a sample of the bank (its calls cost), and every example.
    const rows = [...sampledBank(ROUTED_BANK_PER_SOURCE), ...exampleRows(examples)];
    const embed = this.embed as Embedder;
    const vectors = await embed(
      model,
      rows.map((r) => routedEmbeddingText(r.prompt)),
      AbortSignal.timeout(EMBED_TIMEOUT_MS),
    );
    const weights = await fitScorer(rows, vectors);
    return new ClassifierScorer({ ...weights, embedding: model });
  }
}

/**
 * What a routed embedding model is sent of a text, in training and for each request alike: its
 * head, within the smallest context of the common embedding models whatever the text's script
 * (BERT's 512 tokens, past which all-MiniLM on Ollama refuses the whole batch: a WordPiece token
 * covers at least one character, so 500 characters and the two special tokens fit). The
 * measured features still read the whole prompt.
 */
const ROUTED_EMBEDDING_CHARS = 500;
export const routedEmbeddingText = (text: string): string => embeddingInput(text).slice(0, ROUTED_EMBEDDING_CHARS);

/** Bank prompts per source a routed embedding model embeds to train a policy's classifier. */
const ROUTED_BANK_PER_SOURCE = 40;
const EMBED_TIMEOUT_MS = 180_000;
const MAX_TRAINED = 64;
