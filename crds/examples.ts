import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import yaml from 'js-yaml';

/**
 * The example CRs under examples/: valid ones, and invalid ones whose header comments say
 * which field the API server must reject (`# expect-field:`) and, for CEL rules, with which
 * message (`# expect-message:`). An invalid file with several documents is an update: all
 * documents but the last are created first, the last one is the rejected change.
 */
export interface Example {
  file: string;
  /** All YAML documents of the file, in order. */
  documents: Record<string, unknown>[];
}

export interface InvalidExample extends Example {
  expectField: string;
  expectMessage?: string;
}

export const EXAMPLES_DIR = fileURLToPath(new URL('./examples/', import.meta.url));

function load(dir: string): Example[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.yaml'))
    .sort()
    .map((f) => {
      const file = `${dir}${f}`;
      const documents = yaml
        .loadAll(readFileSync(file, 'utf8'))
        .filter((d): d is Record<string, unknown> => d !== null && typeof d === 'object');
      return { file, documents };
    });
}

export function validExamples(): Example[] {
  return load(EXAMPLES_DIR);
}

export function invalidExamples(): InvalidExample[] {
  return load(`${EXAMPLES_DIR}invalid/`).map((ex) => {
    const text = readFileSync(ex.file, 'utf8');
    const field = /^# expect-field: (.+)$/m.exec(text)?.[1]?.trim();
    if (!field) throw new Error(`${ex.file} has no "# expect-field:" header`);
    const message = /^# expect-message: (.+)$/m.exec(text)?.[1]?.trim();
    return message ? { ...ex, expectField: field, expectMessage: message } : { ...ex, expectField: field };
  });
}
