import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type OllamaDouble, startOllamaDouble } from '../e2e/doubles/ollama.js';

/**
 * The README's main job: the proxy process in standalone mode (--config, --keys-file),
 * routing a tagged request to an Ollama-compatible server and shutting down on SIGTERM.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
let double: OllamaDouble;
let proxy: ChildProcess;
let base = '';
const output: string[] = [];

beforeAll(async () => {
  double = await startOllamaDouble({ models: ['llama3.2:3b'] });
  const dir = mkdtempSync(join(tmpdir(), 'standalone-'));
  writeFileSync(
    join(dir, 'gateway.yaml'),
    [
      'apiVersion: ai.platform/v1beta1',
      'kind: ModelDeployment',
      'metadata: {name: local}',
      `spec: {model: "llama3.2:3b", serviceName: local, endpoint: "${double.url}"}`,
    ].join('\n'),
  );
  writeFileSync(join(dir, 'keys.txt'), '# keys\nsk-standalone\n');
  proxy = spawn(
    join(ROOT, 'node_modules/.bin/tsx'),
    ['proxy/main.ts', '--config', join(dir, 'gateway.yaml'), '--keys-file', join(dir, 'keys.txt'), '--port', '0'],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  proxy.stdout?.on('data', (d: Buffer) => output.push(d.toString()));
  proxy.stderr?.on('data', (d: Buffer) => output.push(d.toString()));
  const deadline = Date.now() + 20_000;
  while (!base && Date.now() < deadline) {
    const line = output
      .join('')
      .split('\n')
      .find((l) => l.includes('"proxy listening"'));
    if (line) base = (JSON.parse(line) as { url: string }).url;
    else await new Promise((r) => setTimeout(r, 50));
  }
  if (!base) throw new Error(`proxy did not start:\n${output.join('')}`);
}, 30_000);

afterAll(async () => {
  if (proxy.exitCode === null) proxy.kill('SIGKILL');
  await double.close();
});

describe('standalone proxy process', () => {
  it("listens on loopback only and routes the config file's model", async () => {
    expect(base).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const res = await fetch(`${base}/openai/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': 'sk-standalone', 'x-tags': 'team:ml' },
      body: JSON.stringify({
        model: 'llama3.2:3b',
        messages: [{ role: 'user', content: 'hi' }],
        tags: ['project:demo'],
      }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { object: string; choices: Array<{ message: { role: string } }> };
    expect(body.object).toBe('chat.completion');
    expect(body.choices[0]?.message.role).toBe('assistant');
    expect(double.requests).toHaveLength(1);
  });

  it('logs no key and no prompt, and stops on SIGTERM', async () => {
    const exited = new Promise<number | null>((resolve) => proxy.once('exit', (code) => resolve(code)));
    proxy.kill('SIGTERM');
    expect(await exited).toBe(0);
    const log = output.join('');
    expect(log).toContain('"shutting down"');
    expect(log).not.toContain('sk-standalone');
    expect(log).not.toContain('"hi"');
  });
});
