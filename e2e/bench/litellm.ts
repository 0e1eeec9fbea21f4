import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

/**
 * LiteLLM's proxy (PyPI `litellm[proxy]`) as a peer in the gateway comparison. Python is never installed behind the
 * user's back: the benchmark looks for an existing `litellm` executable and skips the row without one;
 * `--install-litellm` creates the venv below on request.
 */

export const LITELLM_VENV = join(homedir(), '.cache', 'platform-ai-optimizer', 'litellm-venv');

/** LITELLM_BIN, else the venv's executable; undefined when neither exists. */
export function findLiteLLM(): string | undefined {
  const candidates = [process.env.LITELLM_BIN, join(LITELLM_VENV, 'bin', 'litellm')];
  return candidates.find((bin): bin is string => bin !== undefined && bin !== '' && existsSync(bin));
}

export const LITELLM_MISSING =
  `skipped: not installed (pip install 'litellm[proxy]' into ${LITELLM_VENV}, ` +
  'or run with --install-litellm, or point LITELLM_BIN at a litellm executable)';

export function installLiteLLM(): string {
  execFileSync('python3', ['-m', 'venv', LITELLM_VENV], { stdio: 'inherit' });
  execFileSync(join(LITELLM_VENV, 'bin', 'pip'), ['install', '--quiet', 'litellm[proxy]'], { stdio: 'inherit' });
  const bin = join(LITELLM_VENV, 'bin', 'litellm');
  if (!existsSync(bin)) throw new Error(`pip finished but ${bin} does not exist`);
  return bin;
}

export interface LiteLLMLaunch {
  args: string[];
  env: NodeJS.ProcessEnv;
  /** What a client sends; LiteLLM refuses to start without a master key. */
  masterKey: string;
}

/** Writes the config into dir: the double's model behind LiteLLM's OpenAI provider, no database, errors-only logs. */
export function liteLLMLaunch(doubleUrl: string, dir: string, port: number): LiteLLMLaunch {
  const masterKey = `sk-${randomBytes(32).toString('hex')}`;
  const config = join(dir, 'litellm.yaml');
  writeFileSync(
    config,
    [
      'model_list:',
      '  - model_name: llama3.1:8b',
      '    litellm_params:',
      '      model: openai/llama3.1:8b',
      `      api_base: ${doubleUrl}/v1`,
      '      api_key: x',
      'litellm_settings:',
      '  set_verbose: false',
      'general_settings:',
      `  master_key: ${masterKey}`,
      '',
    ].join('\n'),
  );
  return {
    args: ['--config', config, '--host', '127.0.0.1', '--port', String(port), '--num_workers', '1'],
    env: {
      ...process.env,
      // Offline here; without this it retries a download of its price map at every start.
      LITELLM_LOCAL_MODEL_COST_MAP: 'True',
      LITELLM_LOG: 'ERROR',
    },
    masterKey,
  };
}
