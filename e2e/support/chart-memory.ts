import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import yaml from 'js-yaml';

/**
 * What the chart gives a proxy pod: its V8 heap and young-generation limits and its memory limit
 * (values.yaml), so the suites and benches that hold the proxy to its memory run it as a pod does.
 */
export function chartProxyMemory(): { heapMiB: number; semiSpaceMiB: number; limitMiB: number; nodeOptions: string } {
  const values = yaml.load(
    readFileSync(fileURLToPath(new URL('../../charts/platform-ai-optimizer/values.yaml', import.meta.url)), 'utf8'),
  ) as {
    proxy: { heapMiB: number; semiSpaceMiB: number; resources: { limits: { memory: string } } };
  };
  const limit = /^(\d+)(Mi|Gi)$/.exec(values.proxy.resources.limits.memory);
  if (!limit) throw new Error(`unexpected proxy memory limit ${values.proxy.resources.limits.memory}`);
  const { heapMiB, semiSpaceMiB } = values.proxy;
  return {
    heapMiB,
    semiSpaceMiB,
    limitMiB: Number(limit[1]) * (limit[2] === 'Gi' ? 1024 : 1),
    // What charts/platform-ai-optimizer/templates/proxy.yaml sets.
    nodeOptions: `--max-old-space-size=${heapMiB} --max-semi-space-size=${semiSpaceMiB}`,
  };
}
