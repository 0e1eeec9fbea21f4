import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type OllamaDouble, startOllamaDouble } from '../doubles/ollama.js';
import { type RunningServer, startEverything } from '../mcp/servers.js';
import { installClients } from '../support/agent-clients.js';
import { allBlocks, type Block, ROOT, where } from '../support/docs-blocks.js';
import {
  expandHome,
  outputProblems,
  readerEnv,
  removeSandbox,
  runShell,
  runTypeScript,
  type Sandbox,
  sandbox,
  shellProblems,
  usesAgentCli,
  writeBlockFile,
} from '../support/docs-runner.js';
import { type ProxyProcess, startProxyProcess } from '../support/proxy-process.js';

/**
 * The `<!-- run: standalone -->` blocks of README.md and docs/, run as a reader runs them on
 * their machine: each page's blocks in order, in bash (TypeScript by tsx) from the repository,
 * against a real standalone gateway process. What stands in, and why:
 *
 * - Ollama: the Ollama double, with the models the examples name; the configuration files a
 *   block starts the gateway with are copied with `http://localhost:11434` pointing at it.
 * - `npm install && npm start`: the tier already ran `npm ci`; the gateway starts with the
 *   arguments of package.json's `start` script, on a free port (the docs' `127.0.0.1:8080` is
 *   replaced by its address in later blocks) and with its usage file in the sandbox.
 * - `npm run proxy -- FLAGS`: the same, with FLAGS.
 * - `claude` and `codex`: the pinned CLIs of e2e/clients, installed as coding-agents does.
 * - MCP's example server on its default port (`http://127.0.0.1:3001/mcp`): the real one
 *   (server-everything of e2e/clients) on a free port, configuration files pointed at it.
 */

const MODELS = ['llama3.2:3b', 'qwen2.5:0.5b'];
const BLOCK_TIMEOUT_MS = 300_000;
const OLLAMA = 'http://localhost:11434';
const MCP_EVERYTHING = 'http://127.0.0.1:3001/mcp';

const blocks = allBlocks();
const files = [...new Set(blocks.filter((b) => b.runner === 'standalone').map((b) => b.file))];

let ollama: OllamaDouble;
let everything: RunningServer | undefined;
let clients: string | undefined;
const gateways: ProxyProcess[] = [];

beforeAll(async () => {
  ollama = await startOllamaDouble({ models: MODELS });
  if (blocks.some((b) => b.runner === 'standalone' && usesAgentCli(b.text))) clients = installClients();
  if (blocks.some((b) => b.runner === 'standalone' && b.text.includes(MCP_EVERYTHING)))
    everything = await startEverything();
}, 600_000);

afterAll(async () => {
  for (const g of gateways) await g.stop('SIGTERM');
  await ollama?.close();
  await everything?.stop();
});

/** `npm start` / `npm run proxy -- FLAGS` as the gateway's arguments, or undefined for any other block. */
function gatewayArgs(text: string): string[] | undefined {
  const command = text
    .split('\n')
    .filter((l) => l.trim() && !l.trim().startsWith('#'))
    .join(' ')
    .replace(/^npm install && /, '')
    .trim();
  if (command === 'npm start') {
    const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    // The script starts through the Node 24 launcher (e2e/node/node24.sh); the gateway's flags follow tsx's entry.
    return (pkg.scripts.start ?? '').replace(/^(bash e2e\/node\/node24\.sh )?tsx proxy\/main\.ts\s*/, '').split(/\s+/);
  }
  const m = /^npm run proxy -- (.+)$/.exec(command);
  return m?.[1]?.split(/\s+/);
}

/** The gateway a block starts, with its configuration pointed at the double and its usage in the sandbox. */
async function startGateway(s: Sandbox, args: string[]): Promise<ProxyProcess> {
  for (const g of gateways.splice(0)) await g.stop('SIGTERM');
  const dir = mkdtempSync(join(s.home, 'gateway-'));
  const resolved = args.map((a) => expandHome(s, a));
  const config = resolved.indexOf('--config');
  const file = resolved[config + 1];
  if (config >= 0 && file) {
    const copy = join(dir, basename(file));
    const source = file.startsWith('/') ? file : join(ROOT, file);
    const text = readFileSync(source, 'utf8').replaceAll(OLLAMA, ollama.url);
    writeFileSync(copy, everything ? text.replaceAll(MCP_EVERYTHING, everything.url) : text);
    resolved[config + 1] = copy;
  }
  const gateway = await startProxyProcess([...resolved, '--usage-db', join(dir, 'usage.db')], {
    ...process.env,
    HOME: s.home,
  });
  gateways.push(gateway);
  s.urls.set('http://127.0.0.1:8080', gateway.base);
  s.urls.set('http://localhost:8080', gateway.base);
  return gateway;
}

/** The "proxy listening" line a started gateway printed: what the docs show after `npm start`. */
const listeningLine = (g: ProxyProcess) =>
  g
    .output()
    .split('\n')
    .find((l) => l.includes('"proxy listening"')) ?? '';

describe.each(files)('the standalone blocks of %s', (file) => {
  it('run in order, and print what the page shows', async () => {
    const env = readerEnv(clients ? { PATH: `${join(clients, 'node_modules', '.bin')}:${process.env.PATH}` } : {});
    const s = sandbox(env);
    const problems: string[] = [];
    // What the last block printed, when this suite ran it: an output block shows another runner's otherwise.
    let printed: string | undefined;
    try {
      for (const b of blocks.filter((x) => x.file === file)) {
        // A page's blocks build on each other: after the first failure the rest would only fail after it.
        if (problems.length > 0) break;
        if (b.runner === 'output') {
          if (printed !== undefined) problems.push(...outputProblems(b, printed));
        } else printed = b.runner === 'standalone' ? await runBlock(s, b, problems) : undefined;
      }
    } finally {
      removeSandbox(s);
    }
    expect(problems).toEqual([]);
  }, 900_000);
});

async function runBlock(s: Sandbox, b: Block, problems: string[]): Promise<string> {
  if (b.args.includes('file=')) {
    writeBlockFile(s, b);
    return '';
  }
  const args = gatewayArgs(b.text);
  if (args) {
    try {
      return listeningLine(await startGateway(s, args));
    } catch (err) {
      problems.push(`${where(b)}: the gateway did not start: ${String(err)}`);
      return '';
    }
  }
  const run = b.lang === 'ts' ? await runTypeScript(s, b, BLOCK_TIMEOUT_MS) : await runShell(s, b, BLOCK_TIMEOUT_MS);
  problems.push(...shellProblems(b, run));
  return run.stdout;
}
