import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { AWS_ERROR_RULES } from './providers/aws-errors.js';
import { PROVIDERS } from './providers/table.js';
import { REFERENCE_COMMAND, renderErrorTable, renderReference, staleGeneratedPages } from './reference.js';
import { type JsonSchema, KIND_NAMES, openApiSchema } from './schema.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));

/** The dotted paths of every field and the message of every CEL rule under a schema node. */
function expectedTexts(s: JsonSchema, path: string, out: string[]): string[] {
  for (const rule of s['x-kubernetes-validations'] ?? []) if (rule.message) out.push(rule.message);
  if (s.type === 'array' && s.items) {
    for (const rule of s.items['x-kubernetes-validations'] ?? []) if (rule.message) out.push(rule.message);
  }
  const props = s.type === 'array' ? s.items?.properties : s.properties;
  for (const [k, v] of Object.entries(props ?? {})) {
    const p = `${s.type === 'array' ? `${path}[]` : path}.${k}`;
    out.push(`\`${p}\``);
    expectedTexts(v, p, out);
  }
  return out;
}

describe('the generated docs', () => {
  it(`are current: docs/reference/crds.md and the providers' error tables are what \`${REFERENCE_COMMAND}\` writes now`, () => {
    expect(
      staleGeneratedPages(ROOT),
      `generated docs are out of date with crds/: run \`${REFERENCE_COMMAND}\` and commit the result`,
    ).toEqual([]);
  });

  it('the CRD reference names every field and every CEL rule message of every kind', () => {
    const page = renderReference();
    for (const kind of KIND_NAMES) {
      const schema = openApiSchema(kind);
      const texts = [
        // The object's own rules (those that read metadata.name) are shown with the spec's.
        ...(schema['x-kubernetes-validations'] ?? []).flatMap((r) => r.message ?? []),
        ...expectedTexts(schema.properties?.spec ?? {}, 'spec', []),
        ...expectedTexts(schema.properties?.status ?? {}, 'status', []),
      ];
      for (const text of texts) expect(page, kind).toContain(text.replace(/\|/g, '\\|').replace(/\s+/g, ' '));
    }
  });

  it("each provider's error table has one row per rule, naming its condition reason and the caller's code", () => {
    for (const [type, provider] of Object.entries(PROVIDERS)) {
      if (!provider.errors) continue;
      const table = renderErrorTable(type);
      expect(table.split('\n')).toHaveLength(provider.errors.length + 2);
      for (const r of provider.errors) expect(table).toContain(`${r.problem.status} \`${r.problem.code}\``);
    }
    const aws = renderErrorTable('bedrock');
    expect(aws.split('\n')).toHaveLength(AWS_ERROR_RULES.length + 2);
    for (const r of AWS_ERROR_RULES) expect(aws).toContain(`\`${r.problem.reason}\``);
    expect(aws).not.toMatch(/\{[a-z]+\}/);
  });
});
