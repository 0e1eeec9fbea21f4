import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { installClients } from '../support/agent-clients.js';

/**
 * Real MCP servers from npm (e2e/clients/package.json, pinned), started on free loopback ports
 * and stopped after: server-everything over Streamable HTTP, and a stdio server (server-memory)
 * behind the stdio-to-HTTP bridge the operator runs in a cluster (mcp-proxy).
 */

export interface RunningServer {
  url: string;
  port: number;
  stop(): Promise<void>;
}

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => (a && typeof a === 'object' ? resolve(a.port) : reject(new Error('no port'))));
    });
  });

export const clientBin = (name: string): string => join(installClients(), 'node_modules', '.bin', name);

async function waitListening(url: string, child: ChildProcess, logs: () => string): Promise<void> {
  const until = Date.now() + 60_000;
  while (Date.now() < until) {
    if (child.exitCode !== null) throw new Error(`the server exited: ${logs()}`);
    try {
      await fetch(url, { method: 'GET', signal: AbortSignal.timeout(1000) });
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  throw new Error(`the server did not listen at ${url}: ${logs()}`);
}

function start(
  cmd: string,
  args: string[],
  env: Record<string, string>,
  url: string,
  port: number,
): Promise<RunningServer> {
  const child = spawn(cmd, args, {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const keep = (b: Buffer) => {
    out = (out + b.toString()).slice(-4000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const stop = async () => {
    if (child.exitCode !== null) return;
    child.kill('SIGTERM');
    await new Promise((r) => {
      const t = setTimeout(() => {
        child.kill('SIGKILL');
        r(undefined);
      }, 3000);
      child.once('exit', () => {
        clearTimeout(t);
        r(undefined);
      });
    });
  };
  return waitListening(url, child, () => out).then(
    () => ({ url, port, stop }),
    async (err: unknown) => {
      await stop();
      throw err;
    },
  );
}

/** server-everything over Streamable HTTP at http://127.0.0.1:<port>/mcp. */
export async function startEverything(): Promise<RunningServer> {
  const port = await freePort();
  return start(
    clientBin('mcp-server-everything'),
    ['streamableHttp'],
    { PORT: String(port) },
    `http://127.0.0.1:${port}/mcp`,
    port,
  );
}

/** server-memory on stdio behind mcp-proxy (the bridge), at http://127.0.0.1:<port>/mcp. */
export async function startMemoryBridged(memoryFile: string): Promise<RunningServer> {
  const port = await freePort();
  return start(
    clientBin('mcp-proxy'),
    ['--port', String(port), '--host', '127.0.0.1', '--server', 'stream', '--', clientBin('mcp-server-memory')],
    { MEMORY_FILE_PATH: memoryFile },
    `http://127.0.0.1:${port}/mcp`,
    port,
  );
}
