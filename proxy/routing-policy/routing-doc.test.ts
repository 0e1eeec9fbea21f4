import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { renderedDoc, scorerReference } from './routing-doc.js';
import { DEFAULT_THRESHOLDS } from './scorer.js';

describe('docs/concepts/routing-policies.md', () => {
  it("shows the code's thresholds, shape signals and bank sources (npm run docs:routing writes them)", () => {
    const page = readFileSync(
      fileURLToPath(new URL('../../docs/concepts/routing-policies.md', import.meta.url)),
      'utf8',
    );
    expect(page).toBe(renderedDoc(page));
    expect(scorerReference()).toContain(
      `| \`Balanced\` | ${DEFAULT_THRESHOLDS.Balanced.standard} | ${DEFAULT_THRESHOLDS.Balanced.frontier} |`,
    );
  });
});
