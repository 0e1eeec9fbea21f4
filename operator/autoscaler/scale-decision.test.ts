import { describe, expect, it } from 'vitest';
import type { ModelAutoscaling } from '../../crds/model-deployment.js';
import { decideReplicas, type ModelLoad, type ScaleMemory, type ScaleReason } from './scale-decision.js';

const spec = (over: Partial<ModelAutoscaling> = {}): ModelAutoscaling => ({
  minReplicas: 0,
  maxReplicas: 4,
  scaleDownDelaySeconds: 60,
  hibernateAfterSeconds: 300,
  whileWaking: 'Wait',
  ...over,
});

const load = (inFlight: number, queued = 0, arrived = inFlight + queued, requestsPerSecond = 0): ModelLoad => ({
  inFlight,
  queued,
  arrived,
  requestsPerSecond,
});
const idle = load(0, 0, 0);

/** One autoscaler tick: seconds since the start, the load reported (or none), and what must follow. */
type Step = [seconds: number, load: ModelLoad | undefined, replicas: number, reason: ScaleReason];

/** Runs the ticks as the operator does: the decision's replicas become the next tick's current. */
function replay(s: ModelAutoscaling, start: number, steps: Step[], slots = 4) {
  let current = start;
  let memory: ScaleMemory | undefined;
  const got: Step[] = [];
  for (const [seconds, l] of steps) {
    const d = decideReplicas({ spec: s, slots, current, load: l, now: seconds * 1000, memory });
    got.push([seconds, l, d.replicas, d.reason]);
    current = d.replicas;
    memory = d.memory;
  }
  return got;
}

describe('decideReplicas on load traces', () => {
  it.each<[string, ModelAutoscaling, number, Step[]]>([
    [
      'a request wakes a hibernated model at once; it sleeps again after the idle time, not before',
      spec(),
      0,
      [
        [0, idle, 0, 'Steady'],
        [10, load(0, 1), 1, 'Woken'],
        [20, load(1, 0, 0), 1, 'Steady'],
        [30, idle, 1, 'Steady'],
        [300, idle, 1, 'Steady'],
        [331, idle, 0, 'Hibernated'],
        [400, idle, 0, 'Steady'],
      ],
    ],
    [
      'a request that came and went between two ticks still counts as activity',
      spec(),
      1,
      [
        [0, idle, 1, 'Steady'],
        [290, load(0, 0, 1), 1, 'Steady'],
        [350, idle, 1, 'Steady'],
        [591, idle, 0, 'Hibernated'],
      ],
    ],
    [
      'scales out with in-flight plus queued requests per target, and in only after the delay',
      spec({ minReplicas: 1, hibernateAfterSeconds: undefined }),
      1,
      [
        [0, load(4), 1, 'Steady'],
        [10, load(8, 3), 3, 'ScaledUp'],
        [20, load(16, 9), 4, 'ScaledUp'],
        [30, load(2), 4, 'Steady'],
        [60, load(2), 4, 'Steady'],
        [81, load(2), 1, 'ScaledDown'],
      ],
    ],
    [
      'a burst in the window holds the count: no flapping between ticks',
      spec({ minReplicas: 1, hibernateAfterSeconds: undefined, scaleDownDelaySeconds: 30 }),
      1,
      [
        [0, load(12), 3, 'ScaledUp'],
        [10, load(1), 3, 'Steady'],
        [20, load(12), 3, 'Steady'],
        [30, load(1), 3, 'Steady'],
        [45, load(1), 3, 'Steady'],
        [51, load(5), 2, 'ScaledDown'],
        [90, load(1), 1, 'ScaledDown'],
      ],
    ],
    [
      'the requests-per-second target adds replicas the in-flight count would not',
      spec({ minReplicas: 1, hibernateAfterSeconds: undefined, targetRequestsPerSecond: 5 }),
      1,
      [[0, load(1, 0, 120, 12), 3, 'ScaledUp']],
    ],
    [
      'never beyond maxReplicas, never below minReplicas',
      spec({ minReplicas: 2, maxReplicas: 3, hibernateAfterSeconds: undefined }),
      2,
      [
        [0, load(100), 3, 'ScaledUp'],
        [100, idle, 2, 'ScaledDown'],
        [1000, idle, 2, 'Steady'],
      ],
    ],
    [
      'missing load reports change nothing (an unreachable proxy is not an idle model)',
      spec(),
      2,
      [
        [0, undefined, 2, 'NoLoadReports'],
        [1000, undefined, 2, 'NoLoadReports'],
      ],
    ],
    [
      'after a restart the unknown past counts as busy: no hibernation before the idle time',
      spec(),
      1,
      [
        [0, idle, 1, 'Steady'],
        [299, idle, 1, 'Steady'],
        [301, idle, 0, 'Hibernated'],
      ],
    ],
  ])('%s', (_, s, start, steps) => {
    expect(replay(s, start, steps)).toEqual(steps);
  });

  it('a model woken by a proxy between two ticks stays up even if the load report missed the request', () => {
    const asleep = decideReplicas({
      spec: spec(),
      slots: 4,
      current: 0,
      load: idle,
      now: 1_000_000,
      memory: { wanted: [], lastRequestAt: 0, replicas: 0 },
    });
    expect(asleep.replicas).toBe(0);
    const woken = decideReplicas({
      spec: spec(),
      slots: 4,
      current: 1,
      load: idle,
      now: 1_005_000,
      memory: asleep.memory,
    });
    expect(woken).toMatchObject({ replicas: 1, reason: 'Steady' });
    const later = decideReplicas({
      spec: spec(),
      slots: 4,
      current: 1,
      load: idle,
      now: 1_306_000,
      memory: woken.memory,
    });
    expect(later).toMatchObject({ replicas: 0, reason: 'Hibernated' });
  });

  it('targets the replica’s parallel slots when no targetInFlight is set', () => {
    const d = decideReplicas({
      spec: spec({ minReplicas: 1 }),
      slots: 2,
      current: 1,
      load: load(5),
      now: 0,
      memory: undefined,
    });
    expect(d.replicas).toBe(3);
    expect(d.message).toBe('1 -> 3 replica(s) for 5 in flight and 0 queued (target 2 per replica)');
  });

  it('says why it hibernates', () => {
    const d = decideReplicas({
      spec: spec(),
      slots: 4,
      current: 1,
      load: idle,
      now: 400_000,
      memory: { wanted: [], lastRequestAt: 0, replicas: 1 },
    });
    expect(d).toMatchObject({
      replicas: 0,
      reason: 'Hibernated',
      message: '1 -> 0 replicas: no request for 400 s (hibernateAfterSeconds 300)',
    });
  });

  it('forgets what is older than the scale-down window', () => {
    const d = decideReplicas({
      spec: spec({ minReplicas: 1 }),
      slots: 4,
      current: 1,
      load: load(1),
      now: 1_000_000,
      memory: { wanted: [{ at: 0, replicas: 4 }], lastRequestAt: 0, replicas: 1 },
    });
    expect(d.memory.wanted).toEqual([{ at: 1_000_000, replicas: 1 }]);
  });
});
