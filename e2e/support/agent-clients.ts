import { execFile, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { cacheRoot } from './cache-root.js';

/**
 * The coding-agent CLIs of e2e/clients/package.json (pinned, locked), installed from the npm
 * registry once per lock into ~/.cache/platform-ai-optimizer/clients-<hash>/ with `npm ci`
 * (their binaries ship as platform packages; Claude Code's postinstall links its own, nothing is
 * built or downloaded). Returns the
 * directory whose node_modules/.bin holds `claude` and `codex`.
 */

const HERE = fileURLToPath(new URL('../clients/', import.meta.url));

export function installClients(): string {
  const lock = readFileSync(join(HERE, 'package-lock.json'));
  const hash = createHash('sha256')
    .update(readFileSync(join(HERE, 'package.json')))
    .update(lock)
    .digest('hex')
    .slice(0, 12);
  const dir = join(cacheRoot(), `clients-${hash}`);
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

/**
 * Claude Code in a fresh HOME, telemetry, updates and error reports off (`extraEnv` over that):
 * `claude(...args)` runs it there, asynchronously, so that servers of this process can answer it.
 */
export interface ClaudeSandbox {
  home: string;
  env: Record<string, string>;
  claude: (...args: string[]) => Promise<string>;
}

export function claudeSandbox(clients: string, extraEnv: Record<string, string> = {}): ClaudeSandbox {
  const home = mkdtempSync(join(tmpdir(), 'pao-claude-home-'));
  const env = {
    PATH: process.env.PATH ?? '',
    HOME: home,
    DISABLE_TELEMETRY: '1',
    DISABLE_AUTOUPDATER: '1',
    DISABLE_ERROR_REPORTING: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    ...extraEnv,
  };
  const claude = async (...args: string[]) =>
    (await promisify(execFile)(bin(clients, 'claude'), args, { cwd: home, env, encoding: 'utf8', timeout: 90_000 }))
      .stdout;
  return { home, env, claude };
}

/** What `claude -p --output-format json` prints. */
export interface ClaudeRun {
  is_error: boolean;
  result: string;
  num_turns: number;
  usage: { input_tokens: number; output_tokens: number };
}

/** An HTTP MCP server Claude Code is given with `claude mcp add --transport http NAME URL --header ...`. */
export interface ClaudeMcpServer {
  name: string;
  url: string;
  headers: Record<string, string>;
}

/**
 * One `claude -p` turn against a gateway at `base` (its /anthropic), in a fresh HOME, telemetry,
 * updates and error reports off: with the Bash tool (or `tools`, a --tools list; '' for none),
 * after `claude mcp add` of each of `mcp` in that HOME; `args` go after the model, `env` over the
 * defaults (the small model is the asked one too).
 */
export async function claudePrint(
  clients: string,
  o: {
    base: string;
    key: string;
    model: string;
    prompt: string;
    args?: string[];
    env?: Record<string, string>;
    tools?: string;
    mcp?: ClaudeMcpServer[];
  },
): Promise<ClaudeRun> {
  const { home, env } = claudeSandbox(clients, {
    ANTHROPIC_BASE_URL: `${o.base}/anthropic`,
    ANTHROPIC_API_KEY: o.key,
    ANTHROPIC_DEFAULT_HAIKU_MODEL: o.model,
    ...o.env,
  });
  const run = promisify(execFile);
  for (const m of o.mcp ?? []) {
    const headers = Object.entries(m.headers).flatMap(([k, v]) => ['--header', `${k}: ${v}`]);
    await run(bin(clients, 'claude'), ['mcp', 'add', '--transport', 'http', m.name, m.url, ...headers], {
      cwd: home,
      timeout: 60_000,
      env,
    });
  }
  const { stdout } = await run(
    bin(clients, 'claude'),
    ['-p', o.prompt, '--model', o.model, ...(o.args ?? []), '--tools', o.tools ?? 'Bash', '--output-format', 'json'],
    { cwd: home, timeout: 300_000, env },
  );
  return JSON.parse(stdout) as ClaudeRun;
}
