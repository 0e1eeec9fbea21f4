import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ServiceModel } from '../doubles/aws-shapes.js';

/**
 * botocore's service models of the APIs the AWS double stands in for, as e2e/aws/botocore.sh
 * unpacks them from the pinned botocore wheel into ~/.cache (PyPI only; a no-op when warm).
 */

const HERE = fileURLToPath(new URL('./', import.meta.url));

const BOTOCORE_SERVICES = ['bedrock-runtime', 'bedrock', 'sts'] as const;
export type BotocoreService = (typeof BOTOCORE_SERVICES)[number];

let dir: string | undefined;

/** Fetches (or finds in the cache) the models; returns their directory. Cold: a few seconds. */
function botocoreDir(): string {
  dir ??= execFileSync('bash', [join(HERE, 'botocore.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  })
    .trim()
    .split('\n')
    .pop();
  if (!dir) throw new Error('e2e/aws/botocore.sh printed no directory');
  return dir;
}

const loaded = new Map<BotocoreService, ServiceModel>();

/** One service's service-2.json, parsed. */
export function botocoreModel(service: BotocoreService): ServiceModel {
  let model = loaded.get(service);
  if (model === undefined) {
    model = JSON.parse(readFileSync(join(botocoreDir(), `${service}.json`), 'utf8')) as ServiceModel;
    loaded.set(service, model);
  }
  return model;
}
