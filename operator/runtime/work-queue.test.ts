import { describe, expect, it } from 'vitest';
import { WorkQueue } from './work-queue.js';

const tick = () => new Promise((r) => setTimeout(r, 0));

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** Timers run only when the test says so. */
function manualTimers() {
  const pending: Array<{ fn: () => void; ms: number; cancelled: boolean }> = [];
  return {
    setTimer: (fn: () => void, ms: number) => {
      const t = { fn, ms, cancelled: false };
      pending.push(t);
      return { cancel: () => (t.cancelled = true) };
    },
    delays: () => pending.filter((t) => !t.cancelled).map((t) => t.ms),
    fire: () => {
      for (const t of pending.splice(0)) if (!t.cancelled) t.fn();
    },
  };
}

describe('WorkQueue', () => {
  it('holds a waiting key once however often it is added', async () => {
    const q = new WorkQueue({ concurrency: 1 });
    const seen: string[] = [];
    q.add('a');
    q.add('a');
    q.add('b');
    q.add('a');
    expect(q.depth).toBe(2);
    q.run(async (k) => {
      seen.push(k);
    });
    await tick();
    await q.shutdown();
    expect(seen).toEqual(['a', 'b']);
  });

  it('never runs one key twice at once, and reruns it when it was added meanwhile', async () => {
    const q = new WorkQueue({ concurrency: 4 });
    const gate = deferred();
    let running = 0;
    let maxRunning = 0;
    let runs = 0;
    q.run(async () => {
      running++;
      runs++;
      maxRunning = Math.max(maxRunning, running);
      if (runs === 1) await gate.promise;
      running--;
    });
    q.add('a');
    await tick();
    q.add('a');
    q.add('a');
    await tick();
    expect(runs).toBe(1);
    gate.resolve();
    await tick();
    await tick();
    expect(runs).toBe(2);
    expect(maxRunning).toBe(1);
    await q.shutdown();
  });

  it('runs different keys concurrently up to the limit', async () => {
    const q = new WorkQueue({ concurrency: 2 });
    const gate = deferred();
    let running = 0;
    let maxRunning = 0;
    q.run(async () => {
      running++;
      maxRunning = Math.max(maxRunning, running);
      await gate.promise;
      running--;
    });
    for (const k of ['a', 'b', 'c']) q.add(k);
    await tick();
    expect(maxRunning).toBe(2);
    expect(q.depth).toBe(1);
    gate.resolve();
    await tick();
    await tick();
    await q.shutdown();
    expect(maxRunning).toBe(2);
  });

  it('retries failures with exponential backoff per key and forgets them on success', async () => {
    const timers = manualTimers();
    const errors: number[] = [];
    const q = new WorkQueue({
      concurrency: 1,
      baseDelayMs: 100,
      maxDelayMs: 350,
      setTimer: timers.setTimer,
      onError: (_k, _e, attempt) => errors.push(attempt),
    });
    let calls = 0;
    q.run(async () => {
      calls++;
      if (calls <= 4) throw new Error('boom');
    });
    q.add('a');
    for (const expected of [100, 200, 350, 350]) {
      await tick();
      expect(timers.delays()).toEqual([expected]);
      timers.fire();
    }
    await tick();
    expect(calls).toBe(5);
    expect(errors).toEqual([1, 2, 3, 4]);
    expect(timers.delays()).toEqual([]);
    expect(q.backoffMs(1)).toBe(100);
    await q.shutdown();
  });

  it('requeues after the delay a reconcile asks for, keeping the earliest', async () => {
    const timers = manualTimers();
    const q = new WorkQueue({ concurrency: 1, setTimer: timers.setTimer });
    q.addAfter('a', 5000);
    q.addAfter('a', 1000);
    q.addAfter('a', 3000);
    expect(timers.delays()).toEqual([1000]);
    let calls = 0;
    q.run(async () => {
      calls++;
      return calls === 1 ? { requeueAfterMs: 250 } : undefined;
    });
    timers.fire();
    await tick();
    expect(calls).toBe(1);
    expect(timers.delays()).toEqual([250]);
    timers.fire();
    await tick();
    expect(calls).toBe(2);
    await q.shutdown();
  });

  it('shutdown waits for the running reconcile and drops queued keys', async () => {
    const q = new WorkQueue({ concurrency: 1 });
    const gate = deferred();
    const seen: string[] = [];
    q.run(async (k) => {
      seen.push(k);
      await gate.promise;
    });
    q.add('a');
    q.add('b');
    await tick();
    let finished = false;
    const stopping = q.shutdown().then(() => {
      finished = true;
    });
    await tick();
    expect(finished).toBe(false);
    gate.resolve();
    await stopping;
    expect(seen).toEqual(['a']);
    q.add('c');
    expect(q.depth).toBe(0);
  });
});
