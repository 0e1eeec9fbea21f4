import { afterAll, beforeAll } from 'vitest';
import { type Lane, LaneLock, laneOf } from './lanes.js';

/**
 * Each e2e file holds its lane's lock from before its first hook to after its last
 * (e2e/lanes/lanes.ts); the secret scan holds both, after the others had time to take theirs.
 */

const root = process.env.E2E_LANE_DIR;
const held: LaneLock[] = [];
let file = '';
let waitedMs = 0;
let heldSince = 0;

/** Long enough for a file dispatched just before the scan to have taken its lane's lock. */
const SCAN_GRACE_MS = 5_000;

// biome-ignore lint/correctness/noEmptyPattern: vitest reads the first argument as fixtures, by its pattern; the file is the second's.
beforeAll(async ({}, suite) => {
  if (!root) return;
  file = suite.file.name;
  const asked = performance.now();
  const lane: Lane = laneOf(suite.file.filepath);
  if (lane === 'scan') await new Promise((r) => setTimeout(r, SCAN_GRACE_MS));
  for (const name of lane === 'scan' ? (['cluster', 'light'] as const) : [lane]) {
    const lock = new LaneLock(root, name);
    await lock.acquire();
    held.push(lock);
  }
  heldSince = performance.now();
  waitedMs = heldSince - asked;
});

// A file's duration in vitest's report counts its wait for the lane; this line says what it ran,
// so a lane's critical path can be read from the log.
afterAll(() => {
  if (held.length === 0) return;
  for (const lock of held.splice(0)) lock.release();
  const s = (ms: number) => (ms / 1000).toFixed(1);
  process.stderr.write(
    `[lane ${laneOf(file)}] ${file}: ran ${s(performance.now() - heldSince)} s, waited ${s(waitedMs)} s\n`,
  );
});
