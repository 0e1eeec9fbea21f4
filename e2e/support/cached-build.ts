import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';

/**
 * What the suites share about the real components that e2e/<component>/build.sh scripts build
 * into ~/.cache from package registries: their pinned versions, their output, free ports.
 */

/** KEY=value lines of <dir>/versions.env. */
export function readVersionsEnv(dir: string): Readonly<Record<string, string>> {
  return Object.fromEntries(
    readFileSync(join(dir, 'versions.env'), 'utf8')
      .split('\n')
      .filter((l) => /^[A-Z_]+=/.test(l))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1).trim()]),
  );
}

/**
 * Runs <dir>/build.sh once per process (a warm run only compares stamps) and returns the last
 * line it printed: the path of what it built.
 */
export function cachedBuild(dir: string): () => string {
  let built: string | undefined;
  return () => {
    built ??= execFileSync('bash', [join(dir, 'build.sh')], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'inherit'],
      maxBuffer: 16 * 1024 * 1024,
    })
      .trim()
      .split('\n')
      .pop();
    if (!built) throw new Error(`${join(dir, 'build.sh')} printed no path`);
    return built;
  };
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}
