import { modelServerEndpoint } from '../../crds/constants.js';
import type { EngineName, LoadSignals } from '../../crds/engines/engine.js';
import { engineFor } from '../../crds/engines/table.js';
import type { ExternalProvider } from '../../crds/external-provider.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { resolveNames } from '../../crds/model-names.js';
import type { ProviderIdentity, ProviderTarget } from '../../crds/providers/provider.js';
import { PROVIDERS } from '../../crds/providers/table.js';

/**
 * The routing table: model name -> upstream, rebuilt from the watched resources on every
 * change and swapped in whole, so a request reads one consistent snapshot without locks.
 *
 * The proxy only routes to addresses derived from resources it trusts: in a cluster, a
 * Running ModelDeployment's Service (http://<serviceName>.platform-llms.svc.cluster.local:<port>),
 * never a URL a caller or a status field could inject; in standalone mode, the endpoint
 * written in the operator's own config file.
 */

/** A model the operator deploys in the cluster (or, standalone, a server the config names). */
export interface InClusterRoute {
  kind: 'in-cluster';
  /** The model name callers send and the upstream serves. */
  model: string;
  /** Base URL without /v1. */
  baseUrl: string;
  /** Usage attribution: the ModelDeployment's namespace/name. */
  provider: string;
  /** Models to try, in order, when this one fails before answering. */
  fallback?: readonly string[];
  /** The deployment's own timeouts, where it sets them. */
  timeouts?: RouteTimeouts;
  /**
   * Base URLs of the replicas that answer now (the Service's ready EndpointSlice endpoints): the
   * proxy balances over them itself. Absent where it cannot see them (standalone, or no slice
   * yet): baseUrl, and whatever balances behind it.
   */
  replicas?: readonly string[];
  /** Requests one replica serves at once (OLLAMA_NUM_PARALLEL); more wait in the proxy. Absent: no limit. */
  slots?: number;
  /** How the deployment scales, for requests that find no replica ready. */
  scaling?: RouteScaling;
  /** Tokens of context the server runs with: spec.server.contextLength, else the catalog's serving default. */
  contextLength?: number;
  /** Where its engine exports queue and KV-cache gauges (vLLM): cache-aware routing reads them. */
  loadSignals?: LoadSignals;
  /** The engine serving it (spec.engine); absent: Ollama. */
  engine?: EngineName;
}

export interface RouteScaling {
  namespace: string;
  name: string;
  /** spec.replicas now: 0 means hibernated (or scaled to zero by hand). */
  replicas: number;
  /** The operator's autoscaler manages it: a request may wake it from zero. */
  autoscaled: boolean;
  whileWaking: 'Wait' | 'Fallback';
}

/** A model's own waits (ModelDeployment spec.timeouts), over the gateway's flags. */
interface RouteTimeouts {
  firstByteMs?: number;
  idleMs?: number;
  /** Longest wait in the proxy for a free replica slot (busy replicas, or waking from zero). */
  queueMs?: number;
}

/**
 * A model of a registered ExternalProvider, whichever provider (crds/providers/): its module
 * says how it is called from `target`, plain values from the spec and discovery.
 */
export interface ExternalRoute {
  kind: 'external';
  /** The name callers send. */
  model: string;
  /** Usage attribution: the ExternalProvider's namespace/name. */
  provider: string;
  /** The provider's spec.provider, spec.auth and spec.region, for its module and its credentials. */
  identity: ProviderIdentity;
  /** How the provider is called for this model. */
  target: ProviderTarget;
  /** The model whose price and limits apply (an inference profile's foundation model, an Azure deployment's model; the id itself elsewhere). */
  baseModel: string;
  /** USD the provider's usage spends first. */
  freeCredits?: number;
  /** Models to try, in order, when this one fails before answering. */
  fallback?: readonly string[];
}

type Route = InClusterRoute | ExternalRoute;

/** A model that exists but cannot take traffic now. */
export interface Unavailable {
  kind: 'unavailable';
  model: string;
  provider: string;
  /** Deploying: try again later (503 + Retry-After); Failed: not until someone fixes it. */
  phase: 'Deploying' | 'Failed';
  reason: string;
  /** Models that serve its requests meanwhile, tried in order. */
  fallback?: readonly string[];
}

export type RouteEntry = Route | Unavailable;

/** A name the model lists show: a model that takes traffic now, or an alias of one. */
export interface ModelListing {
  /** The name callers send. */
  id: string;
  /** The served model name: `id` itself, or the model an alias stands for. */
  model: string;
  /** Seconds since the epoch: when its resource was created (or the config loaded). */
  created: number;
  /** The resource serving it (namespace/name). */
  provider: string;
  /** In the CLI model list (the resource's includeInCLI). */
  cli: boolean;
}

export interface RouteSnapshot {
  /** Model names and aliases -> their route (an alias shares its model's entry). */
  entries: ReadonlyMap<string, RouteEntry>;
  models: readonly ModelListing[];
}

export interface BuildOptions {
  /** Standalone mode: a ModelDeployment's spec.endpoint is the upstream, no operator involved. */
  standalone: boolean;
  /** The ready replicas of a Service (its EndpointSlices); undefined when no slice is known. */
  replicasOf?: (serviceName: string) => readonly string[] | undefined;
  /** A deployment's parallel slots per replica (spec.server.numParallel or the catalog's default). */
  slotsOf?: (md: ModelDeployment) => number | undefined;
  /** The context its server runs with (spec.server.contextLength or the catalog's default). */
  contextOf?: (md: ModelDeployment) => number | undefined;
  /** Where hosted providers' endpoint overrides are read (PAO_ENDPOINT_URL_*); process.env by default. */
  env?: NodeJS.ProcessEnv;
  /**
   * `created` of models whose resource has no creationTimestamp (standalone config documents):
   * when the config was loaded, in seconds since the epoch. Defaults to now.
   */
  loadedAt?: number;
}

const createdAt = (iso: string | undefined, opts: BuildOptions) => {
  const t = iso ? Date.parse(iso) : Number.NaN;
  return Number.isNaN(t) ? (opts.loadedAt ?? Math.floor(Date.now() / 1000)) : Math.floor(t / 1000);
};

function timeoutsOf(md: ModelDeployment): RouteTimeouts | undefined {
  const t = md.spec.timeouts;
  if (!t || (t.firstByteSeconds === undefined && t.idleSeconds === undefined && t.queueSeconds === undefined))
    return undefined;
  return {
    ...(t.firstByteSeconds !== undefined ? { firstByteMs: t.firstByteSeconds * 1000 } : {}),
    ...(t.idleSeconds !== undefined ? { idleMs: t.idleSeconds * 1000 } : {}),
    ...(t.queueSeconds !== undefined ? { queueMs: t.queueSeconds * 1000 } : {}),
  };
}

const nameOf = (o: { metadata: { namespace?: string; name?: string } }) =>
  `${o.metadata.namespace ?? ''}/${o.metadata.name ?? ''}`.replace(/^\//, '');

/**
 * Provider routes: a provider the operator found Ready (or Degraded) routes each selected model
 * discovery found (its module says how it is called); in standalone mode, where no operator runs
 * discovery, every selected model.
 * The selected models of a provider that is Failed or not yet checked exist but are unavailable,
 * so callers learn why and the provider's fallbacks serve them meanwhile.
 */
function providerRoutes(
  eps: ExternalProvider[],
  opts: BuildOptions,
): Array<{ route: ExternalRoute | Unavailable; cli: boolean; created: number }> {
  const out: Array<{ route: ExternalRoute | Unavailable; cli: boolean; created: number }> = [];
  for (const ep of [...eps].sort((a, b) => nameOf(a).localeCompare(nameOf(b)))) {
    const usable = opts.standalone || ep.status?.phase === 'Ready' || ep.status?.phase === 'Degraded';
    const fallback = ep.spec.fallback?.length ? { fallback: ep.spec.fallback } : {};
    const at = createdAt(ep.metadata.creationTimestamp, opts);
    if (!usable) {
      const failed = ep.status?.phase === 'Failed';
      const ready = ep.status?.conditions?.find((c) => c.type === 'Ready');
      for (const model of ep.spec.models) {
        out.push({
          route: {
            kind: 'unavailable',
            model,
            provider: nameOf(ep),
            phase: failed ? 'Failed' : 'Deploying',
            reason:
              ready?.message ?? (failed ? 'the provider failed' : 'the operator has not checked the provider yet'),
            ...fallback,
          },
          cli: false,
          created: at,
        });
      }
      continue;
    }
    const module = PROVIDERS[ep.spec.provider];
    for (const model of ep.spec.models) {
      const made = module.target(ep, model, { standalone: opts.standalone, env: opts.env ?? process.env });
      if (!made) continue;
      out.push({
        route: {
          kind: 'external',
          model,
          provider: nameOf(ep),
          identity: {
            provider: ep.spec.provider,
            auth: { ...ep.spec.auth },
            ...(ep.spec.region ? { region: ep.spec.region } : {}),
          },
          ...made,
          ...(ep.spec.freeCredits ? { freeCredits: ep.spec.freeCredits } : {}),
          ...fallback,
        },
        cli: ep.spec.includeInCLI,
        created: at,
      });
    }
  }
  return out;
}

export function buildRoutes(mds: ModelDeployment[], opts: BuildOptions, eps: ExternalProvider[] = []): RouteSnapshot {
  const entries = new Map<string, RouteEntry>();
  const models: ModelListing[] = [];
  // Deterministic choice when several deployments serve one model: the first by name.
  const sorted = [...mds].sort((a, b) => (a.metadata.name ?? '').localeCompare(b.metadata.name ?? ''));
  for (const md of sorted) {
    const model = md.spec.model;
    const provider = nameOf(md);
    let entry: RouteEntry;
    if (opts.standalone) {
      if (!md.spec.endpoint) continue;
      entry = {
        kind: 'in-cluster',
        model,
        baseUrl: md.spec.endpoint.replace(/\/+$/, ''),
        provider,
        ...(md.spec.server?.numParallel ? { slots: md.spec.server.numParallel } : {}),
        ...(md.spec.server?.contextLength ? { contextLength: md.spec.server.contextLength } : {}),
      };
    } else {
      const expected = modelServerEndpoint(md.spec.serviceName, md.spec.port);
      if (md.status?.phase === 'Running' && md.status.endpoint === expected) {
        const replicas = opts.replicasOf?.(md.spec.serviceName);
        const slots = opts.slotsOf?.(md);
        const contextLength = md.spec.server?.contextLength ?? opts.contextOf?.(md);
        entry = {
          kind: 'in-cluster',
          model,
          baseUrl: expected,
          provider,
          ...(replicas ? { replicas } : {}),
          ...(slots ? { slots } : {}),
          ...(contextLength ? { contextLength } : {}),
          scaling: {
            namespace: md.metadata.namespace ?? '',
            name: md.metadata.name ?? '',
            replicas: md.spec.replicas,
            autoscaled: md.spec.autoscaling !== undefined,
            whileWaking: md.spec.autoscaling?.whileWaking ?? 'Wait',
          },
        };
      } else {
        const ready = md.status?.conditions?.find((c) => c.type === 'Ready');
        entry = {
          kind: 'unavailable',
          model,
          provider,
          phase: md.status?.phase === 'Failed' ? 'Failed' : 'Deploying',
          reason: ready?.message ?? 'the model server is being deployed',
        };
      }
    }
    if (md.spec.fallback?.length) entry.fallback = md.spec.fallback;
    if (entry.kind === 'in-cluster') {
      const engine = engineFor(md.spec);
      entry.engine = engine.name;
      if (engine.loadSignals) entry.loadSignals = engine.loadSignals;
      const timeouts = timeoutsOf(md);
      if (timeouts) entry.timeouts = timeouts;
    }
    const existing = entries.get(model);
    if (existing && (existing.kind !== 'unavailable' || entry.kind === 'unavailable')) continue;
    entries.set(model, entry);
  }
  for (const [id, entry] of entries) {
    if (entry.kind === 'unavailable') continue;
    const md = sorted.find((m) => nameOf(m) === entry.provider);
    models.push({
      id,
      model: id,
      created: createdAt(md?.metadata.creationTimestamp, opts),
      provider: entry.provider,
      cli: md?.spec.includeInCLI !== false,
    });
  }
  const inCluster = new Set(entries.keys());
  for (const { route, cli, created: at } of providerRoutes(eps, opts)) {
    // An in-cluster model of the same name keeps the name; a usable provider beats an unusable one.
    const existing = entries.get(route.model);
    if (inCluster.has(route.model) || (existing && (existing.kind !== 'unavailable' || route.kind === 'unavailable')))
      continue;
    entries.set(route.model, route);
    if (route.kind !== 'unavailable') {
      models.push({ id: route.model, model: route.model, created: at, provider: route.provider, cli });
    }
  }
  // Aliases route to their model's entry and are listed beside it (crds/model-names.ts decides who holds one).
  const listed = new Map(models.map((m) => [m.id, m]));
  for (const [alias, model] of resolveNames(mds, eps).aliases) {
    const entry = entries.get(model);
    if (!entry || entries.has(alias)) continue;
    entries.set(alias, entry);
    const of = listed.get(model);
    if (of) models.push({ ...of, id: alias });
  }
  models.sort((a, b) => a.id.localeCompare(b.id));
  return { entries, models };
}

export class RouteTable {
  private snapshot: RouteSnapshot = { entries: new Map(), models: [] };
  private readonly listeners: Array<() => void> = [];

  /** Replaces the table; readers holding the old snapshot finish with it. */
  set(next: RouteSnapshot): void {
    this.snapshot = next;
    for (const l of this.listeners) l();
  }

  /** Called after every change (requests waiting for a replica look again). */
  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  lookup(model: string): RouteEntry | undefined {
    return this.snapshot.entries.get(model);
  }

  models(): readonly ModelListing[] {
    return this.snapshot.models;
  }
}
