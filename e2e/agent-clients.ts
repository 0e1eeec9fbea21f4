import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The coding-agent CLIs of e2e/clients/package.json (pinned, locked), installed from the npm
 * registry once per lock into ~/.cache/platform-ai-optimizer/clients-<hash>/ with `npm ci`
 * (their binaries ship as platform packages; Claude Code's postinstall links its own, nothing is
 * built or downloaded). Returns the
 * directory whose node_modules/.bin holds `claude` and `codex`.
 */

const HERE = fileURLToPath(new URL('./clients/', import.meta.url));

export function installClients(): string {
  const lock = readFileSync(join(HERE, 'package-lock.json'));
  const hash = createHash('sha256')
    .update(readFileSync(join(HERE, 'package.json')))
    .update(lock)
    .digest('hex')
    .slice(0, 12);
  const cache = join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'platform-ai-optimizer');
  const dir = join(cache, `clients-${hash}`);
  if (existsSync(join(dir, 'node_modules', '.bin', 'codex'))) return dir;
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  copyFileSync(join(HERE, 'package.json'), join(tmp, 'package.json'));
  copyFileSync(join(HERE, 'package-lock.json'), join(tmp, 'package-lock.json'));
  execFileSync('npm', ['ci', '--no-audit', '--no-fund'], { cwd: tmp, stdio: 'inherit' });
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  return dir;
}

export const bin = (dir: string, name: 'claude' | 'codex') => join(dir, 'node_modules', '.bin', name);
