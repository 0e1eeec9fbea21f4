import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type OllamaDouble, startOllamaDouble } from '../../e2e/doubles/ollama.js';
import { type ProxyProcess, startProxyProcess } from '../../e2e/support/proxy-process.js';

/**
 * SIGTERM with the real proxy process: readiness goes false first while traffic is still
 * served, then the listener closes, in-flight streams finish within the grace period (or are cut
 * at its end), and every request is in the usage database when the process exits.
 */

const KEY = 'sk-shutdown';
let double: OllamaDouble;
let dir: string;
let proxy: ProxyProcess | undefined;

const start = (flags: string[], db: string) =>
  startProxyProcess([
    '--config',
    join(dir, 'gateway.yaml'),
    '--keys-file',
    join(dir, 'keys.txt'),
    '--usage-db',
    join(dir, db),
    ...flags,
  ]);

const chat = (base: string, stream: boolean) =>
  fetch(`${base}/openai/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': KEY },
    body: JSON.stringify({ model: 'llama3.1:8b', messages: [{ role: 'user', content: 'count slowly' }], stream }),
  });

const exited = (p: ProxyProcess) =>
  new Promise<number | null>((resolve) => {
    if (p.child.exitCode !== null) return resolve(p.child.exitCode);
    p.child.once('exit', (code) => resolve(code));
  });

const recorded = (db: string) => {
  const sqlite = new Database(join(dir, db), { readonly: true });
  try {
    return sqlite.prepare('SELECT status, stream, completion, error_type FROM requests ORDER BY id').all() as Array<{
      status: number;
      stream: number;
      completion: number;
      error_type: string | null;
    }>;
  } finally {
    sqlite.close();
  }
};

beforeAll(async () => {
  double = await startOllamaDouble();
  dir = mkdtempSync(join(tmpdir(), 'proxy-shutdown-'));
  writeFileSync(
    join(dir, 'gateway.yaml'),
    `apiVersion: ai.platform/v1beta1\nkind: ModelDeployment\nmetadata: {name: local}\nspec: {model: "llama3.1:8b", serviceName: local, endpoint: "${double.url}"}\n`,
  );
  writeFileSync(join(dir, 'keys.txt'), `${KEY}\n`);
});
beforeEach(() => double.reset());
afterAll(async () => {
  await proxy?.stop('SIGKILL');
  await double.close();
});

describe('proxy shutdown on SIGTERM', () => {
  it('turns unready, keeps serving through the delay, finishes the stream in flight, and flushes usage', async () => {
    proxy = await start(['--shutdown-delay-seconds', '3', '--drain-seconds', '10'], 'drain.db');
    const p = proxy;
    double.behave({ completionTokens: 10, interTokenDelayMs: 200 });
    const inFlight = await chat(p.base, true);
    expect(inFlight.status).toBe(200);
    const body = inFlight.text();

    p.child.kill('SIGTERM');
    const code = exited(p);
    // Unready first (an order, not a time: the delay leaves a loaded machine room to see it)...
    await expect.poll(async () => (await fetch(`${p.base}/readyz`)).status, { timeout: 2_500, interval: 20 }).toBe(503);
    // ...while the listener still serves: endpoints have not caught up, so a request in the delay is served.
    double.behave({ interTokenDelayMs: 0 });
    expect((await chat(p.base, false)).status).toBe(200);

    // After the delay the listener is closed: a new connection is refused (asked of /readyz,
    // which records no usage).
    await expect
      .poll(
        () =>
          fetch(`${p.base}/readyz`).then(
            () => 'answered',
            () => 'refused',
          ),
        { timeout: 10_000, interval: 100 },
      )
      .toBe('refused');

    const text = await body;
    expect(text).toContain('tok9');
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(await code).toBe(0);
    // The stream is recorded when it ends, after the request of the delay.
    expect(recorded('drain.db')).toEqual([
      { status: 200, stream: 0, completion: 10, error_type: null },
      { status: 200, stream: 1, completion: 10, error_type: null },
    ]);
    expect(p.output()).toMatch(/"stopped".*"cut":false/);
  }, 30_000);

  it('cuts a stream that outlives the grace period, exits, and still records it', async () => {
    proxy = await start(['--shutdown-delay-seconds', '0', '--drain-seconds', '1'], 'cut.db');
    const p = proxy;
    double.behave({ completionTokens: 50, interTokenDelayMs: 200 });
    const inFlight = await chat(p.base, true);
    const body = inFlight.text().catch((err: unknown) => `cut: ${String(err)}`);
    await new Promise((r) => setTimeout(r, 300));
    const sentAt = performance.now();
    p.child.kill('SIGTERM');
    expect(await exited(p)).toBe(0);
    const tookMs = performance.now() - sentAt;
    // It waited out the grace period, and cut the stream long before its 10 s were up.
    expect(tookMs).toBeGreaterThan(900);
    expect(tookMs).toBeLessThan(8_000);
    // The client is not left hanging: its stream ends (cut) when the process goes.
    const text = await body;
    expect(text).not.toContain('tok49');
    const rows = recorded('cut.db');
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ stream: 1, status: 499 });
    expect(p.output()).toMatch(/"stopped".*"cut":true/);
  }, 30_000);
});
