import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { LaneLock, laneOf, laneOrder, lightFilesDone, SuiteTimes } from './lanes.js';

const file = (path: string) => `/repo/e2e/${path}.e2e.test.ts`;

/**
 * Two workers taking files in the given order, each file waiting for its lane's lock as
 * lane-setup.ts makes it: when the last one ends, and how long workers sat waiting.
 */
function playOut(order: string[], seconds: Map<string, number>): { end: number; waited: number } {
  const freeAt: [number, number] = [0, 0];
  const lockedUntil = { cluster: 0, local: 0 };
  let waited = 0;
  for (const f of order) {
    const w = freeAt[0] <= freeAt[1] ? 0 : 1;
    const lane = laneOf(f);
    const locked = lane === 'cluster' || lane === 'local';
    const start = locked ? Math.max(freeAt[w], lockedUntil[lane]) : freeAt[w];
    waited += start - freeAt[w];
    freeAt[w] = start + (seconds.get(f) ?? 0);
    if (locked) lockedUntil[lane] = freeAt[w];
  }
  return { end: Math.max(...freeAt), waited };
}

describe('the e2e lanes', () => {
  it('puts each folder in its lane', () => {
    expect(laneOf(file('real-node/real-pods'))).toBe('cluster');
    expect(laneOf(file('control-plane/faults'))).toBe('cluster');
    expect(laneOf(file('no-cluster/usage-crash'))).toBe('local');
    expect(laneOf(file('no-cluster/spec-fuzz'))).toBe('light');
    expect(laneOf(file('control-plane/secret-scan'))).toBe('scan');
  });

  it('orders a run like the tier so that it lasts about its longer lane, not the two lanes one after another', () => {
    const seconds = new Map<string, number>();
    const add = (lane: string, list: number[]) => {
      for (const [i, s] of list.entries()) seconds.set(file(`${lane}/s${i}-${s}`), s);
    };
    add('control-plane', [304, 73, 49, 21, 17, 17, 15, 14, 13, 12, 12, 11, 10, 9, 8, 8, 7, 4, 3, 3, 2, 1]);
    add('no-cluster', [169, 94, 82, 41, 36, 30, 23, 22, 12, 12, 11, 11, 7, 3, 3, 3, 3, 2, 2]);
    // The light ones by name (lanes.ts's LIGHT).
    const light = {
      'usage-postgres': 61,
      'spec-fuzz': 60,
      'mcp-gateway': 31,
      'mcp-clients': 18,
      'hosted-providers': 11,
    };
    for (const [name, s] of Object.entries(light)) seconds.set(file(`no-cluster/${name}`), s);
    seconds.set(file('control-plane/secret-scan'), 1);
    const files = [...seconds.keys()].sort();

    const order = laneOrder(
      files,
      (f) => f,
      (f) => seconds.get(f) ?? 0,
    );

    expect([...order].sort()).toEqual(files);
    expect(order.at(-1)).toBe(file('control-plane/secret-scan'));
    const sum = (lane: string) =>
      files.filter((f) => laneOf(f) === lane).reduce((a, f) => a + (seconds.get(f) ?? 0), 0);
    const longerLane = Math.max(sum('cluster'), sum('local'));
    const played = playOut(order, seconds);
    expect(played.end).toBeLessThanOrEqual(longerLane * 1.25);
    // The order it replaced (the cluster and local lanes one lane, light beside it) lasted their sum.
    expect(played.end).toBeLessThan(sum('cluster') + sum('local'));
    const naive = playOut(files, seconds);
    expect(played.end).toBeLessThan(naive.end);
  });
});

describe('SuiteTimes', () => {
  let dir = '';
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it("takes this machine's last run, else the typical figure of a long suite, else a default", () => {
    dir = mkdtempSync(join(tmpdir(), 'pao-lanes-'));
    const times = new SuiteTimes(dir);
    const pods = file('real-node/real-pods');
    expect(times.seconds(pods)).toBeGreaterThan(100);
    const unknown = times.seconds(file('no-cluster/never-seen'));
    expect(unknown).toBeGreaterThan(0);
    times.record(pods, 12.34);
    expect(times.seconds(pods)).toBe(12.3);
    expect(new SuiteTimes(dir).seconds(file('no-cluster/never-seen'))).toBe(unknown);
  });
});

describe('LaneLock', () => {
  let dir = '';
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('lets one file of a lane in at a time, and the scan past only once the light files are done', async () => {
    dir = mkdtempSync(join(tmpdir(), 'pao-lanes-'));
    const first = new LaneLock(dir, 'cluster');
    await first.acquire();
    let second = false;
    const waiting = new LaneLock(dir, 'cluster').acquire().then(() => {
      second = true;
    });
    const light = [new LaneLock(dir, 'light'), new LaneLock(dir, 'light')];
    await Promise.all(light.map((l) => l.acquire()));
    await new Promise((r) => setTimeout(r, 600));
    expect(second).toBe(false);
    first.release();
    await waiting;
    expect(second).toBe(true);

    let done = false;
    const scan = lightFilesDone(dir).then(() => {
      done = true;
    });
    light[0]?.release();
    await new Promise((r) => setTimeout(r, 600));
    expect(done).toBe(false);
    light[1]?.release();
    await scan;
    expect(done).toBe(true);
  });
});
