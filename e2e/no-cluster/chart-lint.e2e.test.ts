import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * The chart's rendered objects through kube-score and checkov (e2e/chart-lint/lint.sh): every
 * finding is either fixed or accepted with its reason in accepted.txt, and no acceptance is stale.
 * The renders and the tools' JSON reports are kept in .ci/out/chart-lint/ (CI artifacts).
 */

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

describe('chart linters', () => {
  it('kube-score and checkov find nothing unaccepted in the default and the full render', () => {
    const run = spawnSync('bash', ['e2e/chart-lint/lint.sh'], {
      cwd: ROOT,
      encoding: 'utf8',
      env: { ...process.env, CHART_LINT_OUT: `${ROOT}.ci/out/chart-lint` },
      timeout: 600_000,
    });
    const output = `${run.stdout}\n${run.stderr}`;
    expect(run.status, output).toBe(0);
    for (const render of ['default', 'full']) {
      expect(run.stdout).toMatch(new RegExp(`^kube-score ${render}: 0 critical, 0 warning`, 'm'));
      expect(run.stdout).toMatch(new RegExp(`^checkov ${render}: \\d+ passed, 0 failed`, 'm'));
    }
  }, 600_000);
});
