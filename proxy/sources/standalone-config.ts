import { readFileSync } from 'node:fs';
import yaml from 'js-yaml';
import type { ApiKey } from '../../crds/api-key.js';
import type { Budget } from '../../crds/budget.js';
import type { ExternalProvider } from '../../crds/external-provider.js';
import type { ModelDeployment } from '../../crds/model-deployment.js';
import { formatIssues, kindOf, validateResource } from '../../crds/validation.js';

/**
 * Standalone mode's resources: the same ModelDeployment, ExternalProvider, ApiKey and Budget
 * documents a cluster would hold, read from a YAML file and checked by the CRD schemas (defaults,
 * patterns and CEL rules) instead of an API server.
 */

export interface StandaloneConfig {
  modelDeployments: ModelDeployment[];
  externalProviders: ExternalProvider[];
  /** Keys by digest (status.digest) or by a `name=key` line of the keys file. */
  apiKeys: ApiKey[];
  budgets: Budget[];
}

const KINDS = ['ModelDeployment', 'ExternalProvider', 'ApiKey', 'Budget'];

export class ConfigError extends Error {
  override name = 'ConfigError';
}

export function parseStandaloneConfig(text: string, source: string): StandaloneConfig {
  let docs: unknown[];
  try {
    docs = yaml.loadAll(text);
  } catch (err) {
    throw new ConfigError(`${source} is not valid YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  const config: StandaloneConfig = { modelDeployments: [], externalProviders: [], apiKeys: [], budgets: [] };
  const problems: string[] = [];
  for (const [i, doc] of docs.entries()) {
    if (doc === null || doc === undefined) continue;
    const kind = kindOf(doc);
    if (!kind || !KINDS.includes(kind)) {
      problems.push(`document ${i + 1}: expected a ${KINDS.join(', ')} of ai.platform/v1beta1`);
      continue;
    }
    const result = validateResource(doc);
    if (!result.ok) {
      const name = (doc as { metadata?: { name?: string } }).metadata?.name ?? `document ${i + 1}`;
      problems.push(`${kind} ${name}:\n${formatIssues(result.issues).replace(/^/gm, '  ')}`);
      continue;
    }
    if (result.resource.kind === 'ModelDeployment') {
      if (!result.resource.spec.endpoint) {
        problems.push(
          `ModelDeployment ${result.resource.metadata.name}: spec.endpoint is required in standalone mode (the URL of a running Ollama, e.g. http://localhost:11434)`,
        );
        continue;
      }
      config.modelDeployments.push(result.resource);
    } else if (result.resource.kind === 'ExternalProvider') {
      config.externalProviders.push(result.resource);
    } else if (result.resource.kind === 'ApiKey') {
      config.apiKeys.push(result.resource);
    } else if (result.resource.kind === 'Budget') {
      config.budgets.push(result.resource);
    }
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
