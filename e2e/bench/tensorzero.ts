import { execFileSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

/**
 * TensorZero (the Rust gateway) as a peer in the benchmarks, installed from PyPI as the `tensorzero`
 * wheel, which embeds the gateway, and started through its `_start_http_gateway`. That entry point
 * is private and marked deprecated in the wheel, hence the pinned version: another may move it.
 * Observability is off (no ClickHouse, no PostgreSQL), its config one model with one provider of
 * type "openai" at the double, called as `tensorzero::model_name::<model>` on its OpenAI endpoint.
 */

export const TENSORZERO_VERSION = '2026.6.0';
const VENV = join(homedir(), '.cache', 'platform-ai-optimizer', `tensorzero-${TENSORZERO_VERSION}`);
const PYTHON = join(VENV, 'bin', 'python');
/** The model name callers send; the config names it `bench`. */
export const TENSORZERO_MODEL = 'tensorzero::model_name::bench';

/** The venv's python with the pinned wheel, installed on first use (pip from PyPI, cached). */
export function ensureTensorZero(): string {
  if (existsSync(join(VENV, '.installed'))) return PYTHON;
  execFileSync('python3', ['-m', 'venv', '--clear', VENV], { stdio: 'ignore' });
  execFileSync(join(VENV, 'bin', 'pip'), ['install', '--quiet', `tensorzero==${TENSORZERO_VERSION}`], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  writeFileSync(join(VENV, '.installed'), `${TENSORZERO_VERSION}\n`);
  return PYTHON;
}

/** Prints {"url": "<its OpenAI base URL>"} once listening; exits on SIGTERM (the benches' children all get it). */
const LAUNCHER = [
  'import json, signal, sys',
  'from tensorzero import _start_http_gateway',
  'g = _start_http_gateway(config_file=sys.argv[1], clickhouse_url=None, postgres_url=None, valkey_url=None, async_setup=False)',
  'print(json.dumps({"url": g.base_url}), flush=True)',
  'signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))',
  'signal.pause()',
].join('\n');

/** The config (written into dir) and the command that serves it. */
export function tensorZeroLaunch(
  upstreamModel: string,
  upstreamBase: string,
  dir: string,
): { command: string; args: string[] } {
  const config = join(dir, 'tensorzero.toml');
  writeFileSync(
    config,
    [
      '[gateway.observability]',
      'enabled = false',
      '',
      '[models.bench]',
      'routing = ["double"]',
      '',
      '[models.bench.providers.double]',
      'type = "openai"',
      `model_name = ${JSON.stringify(upstreamModel)}`,
      `api_base = ${JSON.stringify(`${upstreamBase}/v1`)}`,
      'api_key_location = "none"',
      '',
    ].join('\n'),
  );
  return { command: ensureTensorZero(), args: ['-c', LAUNCHER, config] };
}
