import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';
import { laneOf } from './e2e/lanes/lanes.js';

/**
 * The default order, but for the e2e tier's lanes (e2e/lanes/lanes.ts): the first (longest) suite
 * of the cluster lane, then the light lane's, then the rest of the cluster lane's, so that its
 * longest suite and the light lane run side by side; the secret scan after every suite whose
 * output it reads.
 */
class LaneOrder extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const e2e = (f: TestSpecification) => f.project.name === 'e2e';
    const lane = (f: TestSpecification) => laneOf(f.moduleId);
    const cluster = sorted.filter((f) => e2e(f) && lane(f) === 'cluster');
    return [
      ...sorted.filter((f) => !e2e(f)),
      ...cluster.slice(0, 1),
      ...sorted.filter((f) => e2e(f) && lane(f) === 'light'),
      ...cluster.slice(1),
      ...sorted.filter((f) => e2e(f) && lane(f) === 'scan'),
    ];
  }
}

export default defineConfig({
  test: {
    sequence: { sequencer: LaneOrder },
    // Vitest's default on a 2-core machine is one worker, and most unit files wait on sockets and
    // timers more than they compute: three halve the unit tier's wall time (81 -> 38 s measured).
    // The e2e files run in two lanes, one file at a time in each (maxWorkers below).
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
          // Two lanes (e2e/lanes/lanes.ts): the suites of the one control plane one after another,
          // beside them the light ones; each file waits for its lane's lock (e2e/lanes/lane-setup.ts).
          maxWorkers: 2,
          setupFiles: ['e2e/lanes/lane-setup.ts'],
        },
      },
    ],
  },
});
