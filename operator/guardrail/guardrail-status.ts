import type { ExternalProvider } from '../../crds/external-provider.js';
import {
  type DetectorStatus,
  type Guardrail,
  type GuardrailService,
  SERVICE_PROVIDER_TYPES,
} from '../../crds/guardrail.js';
import { compilePattern } from '../../crds/guardrail-pattern.js';
import type { Condition } from '../../crds/meta.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';

/**
 * A Guardrail's status from its spec and what serves models: whether each detector runs. The
 * built-in detectors always do; a pattern does when it compiles as RE2 (the proxies skip one that
 * does not); a judge does when a ModelDeployment or an ExternalProvider serves its model (else
 * every call of it fails, and its onFailure decides); a service does when the ExternalProvider it
 * calls with exists, is of its kind's provider and Ready (the provider's own status says its
 * credentials work), or, for a Presidio analyzer, when the analyzer answers its health check.
 * Ready when every detector is.
 */

export interface Serving {
  deployments: readonly ModelDeployment[];
  providers: readonly ExternalProvider[];
  /** Each Presidio analyzer's health, by its URL: true, or why not. */
  analyzers?: ReadonlyMap<string, true | string>;
}

/** Whether a model name is one the gateway routes: a deployment's model or alias, a provider's model or alias. */
function served(model: string, s: Serving): boolean {
  return (
    s.deployments.some((d) => d.spec.model === model || (d.spec.aliases ?? []).includes(model)) ||
    s.providers.some(
      (p) => (p.spec.models ?? []).includes(model) || (p.spec.aliases ?? []).some((a) => a.name === model),
    )
  );
}

function detectorStatuses(g: Guardrail, s: Serving): DetectorStatus[] {
  const out: DetectorStatus[] = [];
  const { builtIn, patterns, judge } = g.spec.detectors;
  if (builtIn) out.push({ name: 'builtIn', ready: true });
  for (const p of patterns ?? []) {
    const compiled = compilePattern(p.regex);
    out.push(
      typeof compiled === 'string'
        ? { name: `pattern/${p.name}`, ready: false, message: `not RE2, skipped: ${compiled}` }
        : { name: `pattern/${p.name}`, ready: true },
    );
  }
  if (judge) {
    out.push(
      served(judge.model, s)
        ? { name: 'judge', ready: true }
        : {
            name: 'judge',
            ready: false,
            message: `no ModelDeployment or ExternalProvider serves ${judge.model}: every judgement fails, and onFailure (${judge.onFailure ?? 'Allow'}) decides`,
          },
    );
  }
  for (const service of g.spec.detectors.services ?? []) out.push(serviceStatus(service, s));
  return out;
}

function serviceStatus(service: GuardrailService, s: Serving): DetectorStatus {
  const name = `service/${service.name}`;
  const onFailure = `onFailure (${service.onFailure ?? 'Allow'}) decides`;
  if (service.presidio) {
    const health = s.analyzers?.get(service.presidio.url) ?? 'not checked yet';
    return health === true ? { name, ready: true } : { name, ready: false, message: `${health}: ${onFailure}` };
  }
  const [kind, spec] = service.bedrockGuardrail
    ? (['bedrockGuardrail', service.bedrockGuardrail] as const)
    : (['openAIModeration', service.openAIModeration] as const);
  const types: readonly string[] = SERVICE_PROVIDER_TYPES[kind];
  const ep = s.providers.find((p) => p.metadata.name === spec?.provider);
  if (!ep) return { name, ready: false, message: `no ExternalProvider ${spec?.provider ?? ''}: ${onFailure}` };
  if (!types.includes(ep.spec.provider))
    return {
      name,
      ready: false,
      message: `ExternalProvider ${ep.metadata.name} is not ${types.join(' or ')}: ${onFailure}`,
    };
  const ready = ep.status?.conditions?.find((c) => c.type === 'Ready');
  return ready?.status === 'True'
    ? { name, ready: true }
    : { name, ready: false, message: `ExternalProvider ${ep.metadata.name} is not Ready: ${onFailure}` };
}

export function guardrailStatus(
  g: Guardrail,
  s: Serving,
): { detectors: DetectorStatus[]; ready: Omit<Condition, 'lastTransitionTime'> } {
  const detectors = detectorStatuses(g, s);
  const generation = g.metadata.generation ?? 0;
  const unready = detectors.filter((d) => !d.ready);
  const ready: Omit<Condition, 'lastTransitionTime'> = unready.length
    ? {
        type: 'Ready',
        status: 'False',
        reason: 'DetectorNotReady',
        message: unready.map((d) => `${d.name}: ${d.message ?? 'not ready'}`).join('; '),
        observedGeneration: generation,
      }
    : {
        type: 'Ready',
        status: 'True',
        reason: 'DetectorsReady',
        message: `${detectors.length} detector${detectors.length === 1 ? '' : 's'} ready: ${detectors.map((d) => d.name).join(', ')}`,
        observedGeneration: generation,
      };
  return { detectors, ready };
}
