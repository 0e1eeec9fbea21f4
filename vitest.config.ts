import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** The default order, except that the secret scan runs after every suite whose output it reads. */
class SecretScanLast extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const last = (f: TestSpecification) => (f.moduleId.endsWith('secret-scan.e2e.test.ts') ? 1 : 0);
    return [...sorted].sort((a, b) => last(a) - last(b));
  }
}

export default defineConfig({
  test: {
    sequence: { sequencer: SecretScanLast },
    // Vitest's default on a 2-core machine is one worker, and most unit files wait on sockets and
    // timers more than they compute: three halve the unit tier's wall time (81 -> 38 s measured).
    // The e2e files run one at a time whatever this says (fileParallelism below).
    maxWorkers: 3,
    projects: [
      {
        test: {
          name: 'unit',
          include: [
            'crds/**/*.test.ts',
            'operator/**/*.test.ts',
            'proxy/**/*.test.ts',
            'e2e/doubles/**/*.test.ts',
            'e2e/support/**/*.test.ts',
            'e2e/cluster/**/*.test.ts',
          ],
          environment: 'node',
        },
      },
      {
        test: {
          name: 'e2e',
          include: ['e2e/**/*.e2e.test.ts'],
          environment: 'node',
          globalSetup: ['e2e/global-setup.ts'],
          testTimeout: 120_000,
          hookTimeout: 600_000,
          // One control plane serves every suite; files run one after another against it.
          fileParallelism: false,
        },
      },
    ],
  },
});
