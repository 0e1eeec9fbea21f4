import { appendFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { jsonLogger, type Logger } from '../../crds/observability/log.js';

/**
 * Everything the product prints during the e2e run lands in one directory
 * (`.e2e-artifacts/logs/`, set by the global setup as E2E_CAPTURE_DIR): proxy and operator
 * processes' output and the log lines of operators and proxies running inside the tests, in
 * the production JSON format. The secret scan (e2e/control-plane/secret-scan.e2e.test.ts) reads all of it
 * last, and CI keeps it for debugging. Outside the e2e run nothing is written.
 */

export const captureDir = (): string | undefined => process.env.E2E_CAPTURE_DIR || undefined;

/** Appends text as it is (a stream's chunks stay whole) to <capture dir>/<source>.log; a no-op outside the e2e run. */
export function capture(source: string): (text: string) => void {
  const dir = captureDir();
  if (!dir) return () => {};
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${source.replace(/[^A-Za-z0-9_.-]/g, '_')}.log`);
  return (text) => appendFileSync(file, text);
}

/** The production JSON logger writing into the capture (and to the console with E2E_DEBUG). */
export function capturedLogger(component: string): Logger {
  const write = capture(component);
  return jsonLogger(component, (line) => {
    write(`${line}\n`);
    if (process.env.E2E_DEBUG) console.log(line);
  });
}
