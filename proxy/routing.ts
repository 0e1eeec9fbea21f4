import { modelServerEndpoint } from '../crds/constants.js';
import type { ModelDeployment } from '../crds/model-deployment.js';

/**
 * The routing table: model name -> upstream, rebuilt from the watched resources on every
 * change and swapped in whole, so a request reads one consistent snapshot without locks.
 *
 * The proxy only routes to addresses derived from resources it trusts: in a cluster, a
 * Running ModelDeployment's Service (http://<serviceName>.platform-llms.svc.cluster.local:<port>),
 * never a URL a caller or a status field could inject; in standalone mode, the endpoint
 * written in the operator's own config file.
 */

export interface OpenAICompatibleRoute {
  kind: 'openai-compatible';
  /** The model name callers send and the upstream serves. */
  model: string;
  /** Base URL without /v1. */
  baseUrl: string;
  /** Usage attribution: the ModelDeployment's namespace/name. */
  provider: string;
}

export type Route = OpenAICompatibleRoute;

/** A model that exists but cannot take traffic now. */
export interface Unavailable {
  kind: 'unavailable';
  model: string;
  provider: string;
  /** Deploying: try again later (503 + Retry-After); Failed: not until someone fixes it. */
  phase: 'Deploying' | 'Failed';
  reason: string;
}

export type RouteEntry = Route | Unavailable;

export interface ListedModel {
  id: string;
  object: 'model';
  created: number;
  owned_by: string;
}

export interface RouteSnapshot {
  entries: ReadonlyMap<string, RouteEntry>;
  models: readonly ListedModel[];
}

const created = (iso: string | undefined) => Math.floor((iso ? Date.parse(iso) : 0) / 1000);

export interface BuildOptions {
  /** Standalone mode: a ModelDeployment's spec.endpoint is the upstream, no operator involved. */
  standalone: boolean;
}

export function buildRoutes(mds: ModelDeployment[], opts: BuildOptions): RouteSnapshot {
  const entries = new Map<string, RouteEntry>();
  const models: ListedModel[] = [];
  // Deterministic choice when several deployments serve one model: the first by name.
  const sorted = [...mds].sort((a, b) => (a.metadata.name ?? '').localeCompare(b.metadata.name ?? ''));
  for (const md of sorted) {
    const model = md.spec.model;
    const provider = `${md.metadata.namespace ?? ''}/${md.metadata.name ?? ''}`.replace(/^\//, '');
    let entry: RouteEntry;
    if (opts.standalone) {
      if (!md.spec.endpoint) continue;
      entry = { kind: 'openai-compatible', model, baseUrl: md.spec.endpoint.replace(/\/+$/, ''), provider };
    } else {
      const expected = modelServerEndpoint(md.spec.serviceName, md.spec.port);
      if (md.status?.phase === 'Running' && md.status.endpoint === expected) {
        entry = { kind: 'openai-compatible', model, baseUrl: expected, provider };
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
    const existing = entries.get(model);
    if (existing && (existing.kind !== 'unavailable' || entry.kind === 'unavailable')) continue;
    entries.set(model, entry);
  }
  for (const [id, entry] of entries) {
    if (entry.kind === 'unavailable') continue;
    const md = sorted.find(
      (m) => `${m.metadata.namespace ?? ''}/${m.metadata.name ?? ''}`.replace(/^\//, '') === entry.provider,
    );
    models.push({ id, object: 'model', created: created(md?.metadata.creationTimestamp), owned_by: entry.provider });
  }
  models.sort((a, b) => a.id.localeCompare(b.id));
  return { entries, models };
}

export class RouteTable {
  private snapshot: RouteSnapshot = { entries: new Map(), models: [] };

  /** Replaces the table; readers holding the old snapshot finish with it. */
  set(next: RouteSnapshot): void {
    this.snapshot = next;
  }

  lookup(model: string): RouteEntry | undefined {
    return this.snapshot.entries.get(model);
  }

  models(): readonly ListedModel[] {
    return this.snapshot.models;
  }
}
