import { spawnSync } from 'node:child_process';
import { KubeConfig } from '@kubernetes/client-node';
import { inject } from 'vitest';

/** Helpers for e2e suites: the real kubectl, and client-node against the suite's cluster. */

export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

export function kubectl(args: string[], input?: string): Run {
  const res = spawnSync(inject('kubectl'), ['--kubeconfig', inject('kubeconfig'), ...args], {
    encoding: 'utf8',
    input,
    timeout: 60_000,
    // `get events -A -o json` after a whole run is megabytes.
    maxBuffer: 256 * 1024 * 1024,
  });
  return { code: res.status ?? -1, stdout: res.stdout ?? '', stderr: res.stderr ?? '' };
}

/** kubectl that must succeed; returns stdout. */
export function kubectlOk(args: string[], input?: string): string {
  const res = kubectl(args, input);
  if (res.code !== 0) throw new Error(`kubectl ${args.join(' ')} failed (${res.code}): ${res.stderr}`);
  return res.stdout;
}

/** The reasons of a namespace's Events a field selector picks (`involvedObject.name=x`, ...), as listed. */
export const eventReasons = (namespace: string, fieldSelector: string): string[] =>
  kubectlOk(['get', 'events', '-n', namespace, '--field-selector', fieldSelector, '-o', 'jsonpath={.items[*].reason}'])
    .split(' ')
    .filter(Boolean);

/** Applies objects with the real kubectl (client-side apply), as a user would. */
export function applyObjects(...objects: object[]): string {
  return kubectlOk(['apply', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objects }));
}

export function kubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(inject('kubeconfig'));
  return kc;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function eventually<T>(
  what: string,
  timeoutMs: number,
  probe: () => Promise<T | undefined> | T | undefined,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await probe();
      if (v !== undefined && v !== false) return v;
    } catch (err) {
      last = err;
    }
    await sleep(250);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ''}`);
}

/** The real helm against the suite's cluster, which must succeed; returns stdout. */
export function helmOk(...args: string[]): string {
  const res = spawnSync(inject('helm'), [...args, '--kubeconfig', inject('kubeconfig')], {
    encoding: 'utf8',
    timeout: 180_000,
  });
  if (res.status !== 0) throw new Error(`helm ${args.join(' ')}: ${res.stderr}`);
  return res.stdout;
}

/** The suites' setup made platform-llms; lets a release of the chart adopt it as Helm would its own. */
export function adoptLlmsNamespace(release: string): void {
  kubectlOk(['label', 'ns', 'platform-llms', 'app.kubernetes.io/managed-by=Helm', '--overwrite']);
  kubectlOk([
    'annotate',
    'ns',
    'platform-llms',
    `meta.helm.sh/release-name=${release}`,
    'meta.helm.sh/release-namespace=platform-agent',
    '--overwrite',
  ]);
}
