import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { validateFiles } from './cli.js';
import { EXAMPLES_DIR, validExamples } from './examples.js';

describe('validate command', () => {
  it('accepts the shipped examples, one line per resource, skipping other APIs', () => {
    const lines: string[] = [];
    expect(validateFiles([EXAMPLES_DIR], (l) => lines.push(l))).toBe(true);
    // One line per resource of the API, none for the Secrets beside them.
    const resources = validExamples().flatMap((e) => e.documents.filter((d) => d.apiVersion === 'ai.platform/v1beta1'));
    expect(lines).toHaveLength(resources.length);
    expect(lines.every((l) => l.startsWith('✓ '))).toBe(true);
    expect(lines.some((l) => l.includes('Secret'))).toBe(false);
  });

  it('fails on a broken document and names the field, and on a file that is not YAML', () => {
    const dir = mkdtempSync(join(tmpdir(), 'validate-'));
    const bad = join(dir, 'bad.yaml');
    writeFileSync(
      bad,
      'apiVersion: ai.platform/v1beta1\nkind: ModelDeployment\nmetadata: {name: x}\nspec: {model: llama3.1:8b, serviceName: s, port: 0}\n',
    );
    const notYaml = join(dir, 'broken.yaml');
    writeFileSync(notYaml, 'a: [unclosed\n');
    const lines: string[] = [];
    expect(validateFiles([bad, notYaml], (l) => lines.push(l))).toBe(false);
    expect(lines[0]).toContain('✗');
    expect(lines[0]).toContain('spec.port: must be >= 1');
    expect(lines[1]).toMatch(/^✗ .*broken\.yaml: not YAML/);
  });
});
