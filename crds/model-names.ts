import type { ExternalProvider } from './external-provider.js';
import type { ModelDeployment } from './model-deployment.js';

/**
 * Which names a model answers to, across the cluster. A ModelDeployment serves its spec.model, an
 * ExternalProvider its spec.models; both may declare aliases (other names callers send, such as
 * the Anthropic ids Claude Code asks for). An alias is unique across the cluster: the proxy
 * routes it and the operator reports on it from this one function, so they cannot disagree.
 *
 * Rules, in order: a served model name is never an alias (the model keeps its name); among
 * resources claiming the same alias for different models, the oldest claim keeps it
 * (creationTimestamp, then ModelDeployment before ExternalProvider, then namespace/name), as
 * Gateway API resolves conflicting routes; claims that name the same model agree and all stand.
 * Every refused claim is reported on its resource, never dropped silently.
 */

type Owner = ModelDeployment | ExternalProvider;

interface AliasClaim {
  alias: string;
  /** The model name the alias stands for (a served model name). */
  model: string;
  owner: { kind: Owner['kind']; namespace: string; name: string };
}

interface AliasRefusal {
  alias: string;
  message: string;
}

export interface NameClaims {
  /** Alias -> the model name it routes to. */
  aliases: ReadonlyMap<string, string>;
  /** `<Kind>/<namespace>/<name>` -> the aliases of that resource that do not stand. */
  refused: ReadonlyMap<string, readonly AliasRefusal[]>;
}

export const ownerKey = (o: { kind: string; metadata: { namespace?: string; name?: string } }): string =>
  `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name ?? ''}`;

const describe = (o: AliasClaim['owner']) => `${o.kind} ${o.namespace}/${o.name}`;

function claimsOf(o: Owner): AliasClaim[] {
  const owner = { kind: o.kind, namespace: o.metadata.namespace ?? '', name: o.metadata.name ?? '' };
  if (o.kind === 'ModelDeployment') {
    return (o.spec.aliases ?? []).map((alias) => ({ alias, model: o.spec.model, owner }));
  }
  return (o.spec.aliases ?? []).map((a) => ({ alias: a.name, model: a.model, owner }));
}

/** Older first; ties by kind (deployments first) and name, so every replica decides alike. */
function byAge(a: Owner, b: Owner): number {
  const ta = a.metadata.creationTimestamp ?? '';
  const tb = b.metadata.creationTimestamp ?? '';
  if (ta !== tb) return ta === '' ? 1 : tb === '' ? -1 : ta < tb ? -1 : 1;
  if (a.kind !== b.kind) return a.kind === 'ModelDeployment' ? -1 : 1;
  return ownerKey(a).localeCompare(ownerKey(b));
}

export function resolveNames(mds: readonly ModelDeployment[], eps: readonly ExternalProvider[]): NameClaims {
  const servedBy = new Map<string, AliasClaim['owner']>();
  for (const o of [...mds, ...eps].sort(byAge)) {
    const owner = { kind: o.kind, namespace: o.metadata.namespace ?? '', name: o.metadata.name ?? '' };
    const names = o.kind === 'ModelDeployment' ? [o.spec.model] : o.spec.models;
    for (const n of names) if (!servedBy.has(n)) servedBy.set(n, owner);
  }
  const aliases = new Map<string, string>();
  const holder = new Map<string, AliasClaim['owner']>();
  const refused = new Map<string, AliasRefusal[]>();
  const refuse = (c: AliasClaim, message: string) => {
    const key = `${c.owner.kind}/${c.owner.namespace}/${c.owner.name}`;
    refused.set(key, [...(refused.get(key) ?? []), { alias: c.alias, message }]);
  };
  for (const o of [...mds, ...eps].sort(byAge)) {
    for (const c of claimsOf(o)) {
      const served = servedBy.get(c.alias);
      if (served) {
        refuse(c, `alias ${c.alias} is the model name ${describe(served)} serves`);
        continue;
      }
      const taken = aliases.get(c.alias);
      const by = holder.get(c.alias);
      if (taken === undefined || !by) {
        aliases.set(c.alias, c.model);
        holder.set(c.alias, c.owner);
      } else if (taken !== c.model) {
        refuse(c, `alias ${c.alias} already stands for ${taken} (${describe(by)}, the older claim)`);
      }
    }
  }
  return { aliases, refused };
}

/** Whether a watch event can change any resource's aliases: names, aliases or age changed, or it came or went. */
export function namesMayChange(event: string, obj: Owner, old?: Owner): boolean {
  if (event === 'resync') return false;
  if (event !== 'update' || !old) return true;
  const names = (o: Owner) =>
    JSON.stringify([
      o.metadata.creationTimestamp,
      o.kind === 'ModelDeployment' ? [o.spec.model] : o.spec.models,
      o.spec.aliases ?? [],
    ]);
  return names(obj) !== names(old);
}
