import { readFileSync } from 'node:fs';
import yaml from 'js-yaml';
import type { ApiKey } from '../../crds/api-key.js';
import type { Budget } from '../../crds/budget.js';
import type { ExternalProvider } from '../../crds/external-provider.js';
import type { Guardrail } from '../../crds/guardrail.js';
import type { IdentityProvider } from '../../crds/identity-provider.js';
import type { McpServer } from '../../crds/mcp-server.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import type { RoutingPolicy } from '../../crds/routing-policy.js';
import { formatIssues, kindOf, validateResource } from '../../crds/validation.js';

/**
 * Standalone mode's resources: the same ModelDeployment, ExternalProvider, ApiKey, Budget,
 * McpServer, RoutingPolicy, IdentityProvider and Guardrail documents a cluster would hold, read from a YAML file and checked by the CRD schemas
 * (defaults, patterns and CEL rules) instead of an API server.
 */

export interface StandaloneConfig {
  modelDeployments: ModelDeployment[];
  externalProviders: ExternalProvider[];
  /** Keys by digest (status.digest) or by a `name=key` line of the keys file. */
  apiKeys: ApiKey[];
  budgets: Budget[];
  /** MCP servers at their spec.url (standalone mode runs no stdio server). */
  mcpServers: McpServer[];
  /** Routing policies with their examples inline (standalone mode has no ConfigMaps to read). */
  routingPolicies: RoutingPolicy[];
  /** Issuers whose tokens callers may present (OpenID providers: standalone mode has no cluster issuer). */
  identityProviders: IdentityProvider[];
  guardrails: Guardrail[];
}

interface StandaloneResources {
  ModelDeployment: ModelDeployment;
  ExternalProvider: ExternalProvider;
  ApiKey: ApiKey;
  Budget: Budget;
  McpServer: McpServer;
  RoutingPolicy: RoutingPolicy;
  IdentityProvider: IdentityProvider;
  Guardrail: Guardrail;
}

type StandaloneKind = keyof StandaloneResources;

interface KindRule<K extends StandaloneKind> {
  /** Why standalone mode cannot take a resource the schema accepts (it has no operator), if it cannot. */
  refuse?: (resource: StandaloneResources[K]) => string | undefined;
  add: (config: StandaloneConfig, resource: StandaloneResources[K]) => void;
}

/** The kinds a config file may hold, in the order error messages name them. */
const RULES: { [K in StandaloneKind]: KindRule<K> } = {
  ModelDeployment: {
    refuse: (md) =>
      md.spec.endpoint
        ? undefined
        : 'spec.endpoint is required in standalone mode (the URL of a running Ollama, e.g. http://localhost:11434)',
    add: (config, md) => config.modelDeployments.push(md),
  },
  ExternalProvider: { add: (config, ep) => config.externalProviders.push(ep) },
  ApiKey: { add: (config, ak) => config.apiKeys.push(ak) },
  Budget: { add: (config, b) => config.budgets.push(b) },
  McpServer: {
    refuse: (server) =>
      server.spec.stdio
        ? 'spec.stdio servers are run by the operator in a cluster; standalone mode takes spec.url: run the server behind a stdio-to-HTTP bridge yourself (such as mcp-proxy) and give its URL'
        : undefined,
    add: (config, server) => config.mcpServers.push(server),
  },
  RoutingPolicy: {
    refuse: (policy) =>
      policy.spec.scorer?.semantic?.examplesFrom
        ? 'spec.scorer.semantic.examplesFrom reads a ConfigMap of a cluster, and standalone mode has none: put the examples inline in spec.scorer.semantic.examples'
        : undefined,
    add: (config, policy) => config.routingPolicies.push(policy),
  },
  IdentityProvider: {
    refuse: (ip) =>
      ip.spec.kubernetes
        ? "spec.kubernetes trusts a cluster's ServiceAccount tokens, and standalone mode has no cluster: give spec.issuer, an OpenID provider"
        : undefined,
    add: (config, ip) => config.identityProviders.push(ip),
  },
  Guardrail: { add: (config, g) => config.guardrails.push(g) },
};

const KINDS = Object.keys(RULES) as StandaloneKind[];

const isStandaloneKind = (kind: string | undefined): kind is StandaloneKind =>
  kind !== undefined && Object.hasOwn(RULES, kind);

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Adds a validated resource to the config, or says why standalone mode refuses it. */
function admit<K extends StandaloneKind>(
  kind: K,
  resource: StandaloneResources[K],
  config: StandaloneConfig,
): string | undefined {
  const rule: KindRule<K> = RULES[kind];
  const refused = rule.refuse?.(resource);
  if (refused) return `${kind} ${resource.metadata.name}: ${refused}`;
  rule.add(config, resource);
  return undefined;
}

export function parseStandaloneConfig(text: string, source: string): StandaloneConfig {
  let docs: unknown[];
  try {
    docs = yaml.loadAll(text);
  } catch (err) {
    throw new ConfigError(`${source} is not valid YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  const config: StandaloneConfig = {
    modelDeployments: [],
    externalProviders: [],
    apiKeys: [],
    budgets: [],
    mcpServers: [],
    routingPolicies: [],
    identityProviders: [],
    guardrails: [],
  };
  const problems: string[] = [];
  for (const [i, doc] of docs.entries()) {
    if (doc === null || doc === undefined) continue;
    const kind = kindOf(doc);
    if (!isStandaloneKind(kind)) {
      problems.push(`document ${i + 1}: expected a ${KINDS.join(', ')} of ai.platform/v1beta1`);
      continue;
    }
    const result = validateResource(doc);
    if (!result.ok) {
      const name = (doc as { metadata?: { name?: string } }).metadata?.name ?? `document ${i + 1}`;
      problems.push(`${kind} ${name}:\n${formatIssues(result.issues).replace(/^/gm, '  ')}`);
      continue;
    }
    // kindOf named the kind the schema validated, so the resource is of that kind.
    const refused = admit(kind, result.resource as StandaloneResources[typeof kind], config);
    if (refused) problems.push(refused);
  }
  if (problems.length > 0) throw new ConfigError(`${source} is not a valid gateway config:\n${problems.join('\n')}`);
  return config;
}

export function loadStandaloneConfig(path: string): StandaloneConfig {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  return parseStandaloneConfig(text, path);
}
