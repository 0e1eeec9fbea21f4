import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';
import { laneOrder, SuiteTimes } from './e2e/lanes/lanes.js';

/**
 * The default order, but for the e2e tier's lanes (e2e/lanes/lanes.ts): its files in the order
 * that keeps the cluster lane and the local lane side by side on the two workers, by what each
 * file ran last time on this machine.
 */
class LaneOrder extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const e2e = (f: TestSpecification) => f.project.name === 'e2e';
    const times = new SuiteTimes();
    return [
      ...sorted.filter((f) => !e2e(f)),
      ...laneOrder(
        sorted.filter(e2e),
        (f) => f.moduleId,
        (file) => times.seconds(file),
      ),
    ];
  }
}

export default defineConfig({
  test: {
    sequence: { sequencer: LaneOrder },
    // Vitest's default on a 2-core machine is one worker, and most unit files wait on sockets and
    // timers more than they compute: three halve the unit tier's wall time (81 -> 38 s measured).
    // The e2e files run on two workers, in lanes (maxWorkers below).
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
            'e2e/lanes/**/*.test.ts',
            'e2e/bench/**/*.test.ts',
          ],
          environment: 'node',
          // Vitest's default 5 s is a time figure: a loaded CI machine stretched tests of 1.5-2 s
          // alone past it (a timeout is for a hang, not for a slow machine).
          testTimeout: 20_000,
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
          // Two workers (e2e/lanes/lanes.ts): the control plane's suites one after another, beside
          // them the heavy local ones one after another, and the light ones wherever a worker is
          // free; each file waits for its lane's lock (e2e/lanes/lane-setup.ts).
          maxWorkers: 2,
          setupFiles: ['e2e/lanes/lane-setup.ts'],
        },
      },
    ],
  },
});
