import { afterAll, beforeAll } from 'vitest';
import { LaneLock, laneOf, lightFilesDone, SuiteTimes, suiteKey } from './lanes.js';

/**
 * Each e2e file holds its lane's lock from before its first hook to after its last
 * (e2e/lanes/lanes.ts); a light file holds a marker of its own; the secret scan holds both locks
 * and waits for the light files' markers to go, after the others had time to take theirs.
 */

const root = process.env.E2E_LANE_DIR;
const held: LaneLock[] = [];
let file = '';
let waitedMs = 0;
let heldSince = 0;

/** Long enough for a file dispatched just before the scan to have taken its lock or marker. */
const SCAN_GRACE_MS = 5_000;

// biome-ignore lint/correctness/noEmptyPattern: vitest reads the first argument as fixtures, by its pattern; the file is the second's.
beforeAll(async ({}, suite) => {
  if (!root) return;
  file = suite.file.filepath;
  const asked = performance.now();
  const lane = laneOf(file);
  if (lane === 'scan') await new Promise((r) => setTimeout(r, SCAN_GRACE_MS));
  for (const name of lane === 'scan' ? (['cluster', 'local'] as const) : [lane]) {
    const lock = new LaneLock(root, name);
    await lock.acquire();
    held.push(lock);
  }
  if (lane === 'scan') await lightFilesDone(root);
  heldSince = performance.now();
  waitedMs = heldSince - asked;
});

// A file's duration in vitest's report counts its wait for the lane; this line says what it ran,
// so a lane's critical path can be read from the log, and the next run's order uses it.
afterAll(() => {
  if (held.length === 0) return;
  for (const lock of held.splice(0)) lock.release();
  const ran = (performance.now() - heldSince) / 1000;
  new SuiteTimes().record(file, ran);
  process.stderr.write(
    `[lane ${laneOf(file)}] ${suiteKey(file)}: ran ${ran.toFixed(1)} s, waited ${(waitedMs / 1000).toFixed(1)} s\n`,
  );
});
