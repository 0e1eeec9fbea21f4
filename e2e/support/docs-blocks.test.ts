import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import yaml from 'js-yaml';
import { Registry } from 'prom-client';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { AWS_ERROR_RULES } from '../../crds/providers/aws-errors.js';
import { PROVIDERS } from '../../crds/providers/table.js';
import { formatIssues, kindOf, validateResource } from '../../crds/validation.js';
import { bedrockPermissionPolicy, roleTrustPolicy } from '../../operator/external-provider/iam-policy.js';
import { ControllerMetrics } from '../../operator/runtime/controller-metrics.js';
import { REFUSAL_CODES } from '../../proxy/identity/refusals.js';
import { ProxyMetrics } from '../../proxy/telemetry/metrics.js';
import {
  allBlocks,
  type Block,
  docFiles,
  extractBlocks,
  fillPlaceholders,
  hereDocuments,
  namedPaths,
  option,
  PLACEHOLDERS,
  placeholdersIn,
  ROOT,
  where,
} from './docs-blocks.js';
import { outputProblems } from './docs-runner.js';

/**
 * The unit tier's half of "every command and manifest in the docs is run by a test": each
 * fenced block of README.md and docs/ names a runner, manifests pass the CRD validators, Helm
 * values pass the chart's schema, placeholders have test values, named files exist, and the
 * pages that list codes name every one the code has. The e2e suites run the rest.
 */

const blocks = allBlocks();
const RUNNABLE = new Set(['standalone', 'cluster', 'validate', 'values']);

/** Our documents in a YAML text: each must validate; other APIs' need apiVersion, kind and a name. */
function manifestProblems(text: string): string[] {
  const problems: string[] = [];
  for (const doc of yaml.loadAll(text)) {
    if (doc === null || doc === undefined) continue;
    if (kindOf(doc)) {
      const result = validateResource(doc);
      if (!result.ok) problems.push(formatIssues(result.issues));
      continue;
    }
    const d = doc as { apiVersion?: unknown; kind?: unknown; metadata?: { name?: unknown } };
    if (typeof d.apiVersion !== 'string' || typeof d.kind !== 'string' || typeof d.metadata?.name !== 'string')
      problems.push('not a Kubernetes object (apiVersion, kind, metadata.name)');
  }
  return problems;
}

const isManifest = (text: string) => /^apiVersion:/m.test(text) && /^kind:/m.test(text);

function deepMerge(base: unknown, over: unknown): unknown {
  if (over === null || typeof over !== 'object' || Array.isArray(over)) return over;
  if (base === null || typeof base !== 'object' || Array.isArray(base)) return over;
  const out: Record<string, unknown> = { ...(base as Record<string, unknown>) };
  for (const [k, v] of Object.entries(over)) out[k] = deepMerge(out[k], v);
  return out;
}

/** Every literal error code the proxy gives a caller: ProxyError's third argument and its helpers'. */
function codesInCode(): Set<string> {
  const codes = new Set<string>();
  const walk = (dir: string): string[] =>
    readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) =>
      e.isDirectory()
        ? walk(join(dir, e.name))
        : e.name.endsWith('.ts') && !e.name.endsWith('.test.ts')
          ? [join(dir, e.name)]
          : [],
    );
  for (const file of [...walk('proxy'), ...walk('crds')]) {
    const src = ts.createSourceFile(file, readFileSync(join(ROOT, file), 'utf8'), ts.ScriptTarget.Latest, true);
    const visit = (n: ts.Node): void => {
      if (ts.isNewExpression(n) || ts.isCallExpression(n)) {
        const callee = n.expression.getText(src);
        const code = n.arguments?.[2];
        if (['ProxyError', 'invalidRequest', 'bad'].includes(callee)) {
          if (code && ts.isStringLiteral(code)) codes.add(code.text);
          else if (!code && callee === 'invalidRequest') codes.add('invalid_request');
        }
      }
      ts.forEachChild(n, visit);
    };
    visit(src);
  }
  for (const provider of Object.values(PROVIDERS)) for (const r of provider.errors ?? []) codes.add(r.problem.code);
  for (const r of AWS_ERROR_RULES) codes.add(r.problem.code);
  return codes;
}

describe('extraction', () => {
  it('finds fenced blocks with their runner, language and line, indented ones too', () => {
    const page = [
      '# Title',
      '',
      '<!-- run: cluster -->',
      '```sh',
      'kubectl get md',
      '```',
      '',
      '1. A step:',
      '',
      '   <!-- run: no (needs a cloud) -->',
      '   ````yaml',
      '   a: 1',
      '   ```',
      '   b: 2',
      '   ````',
      '',
      '```text',
      'no directive',
      '```',
    ].join('\n');
    expect(extractBlocks('x.md', page)).toEqual([
      { file: 'x.md', line: 4, lang: 'sh', text: 'kubectl get md\n', runner: 'cluster', args: '' },
      { file: 'x.md', line: 11, lang: 'yaml', text: 'a: 1\n```\nb: 2\n', runner: 'no', args: '(needs a cloud)' },
      { file: 'x.md', line: 17, lang: 'text', text: 'no directive\n', runner: undefined, args: '' },
    ]);
  });

  it('compares shown output by shape (JSON) or by line, ages aside (text)', () => {
    const json = (text: string) => ({ file: 'x.md', line: 1, lang: 'json', text, runner: 'output' as const, args: '' });
    const table = (text: string) => ({ ...json(text), lang: 'text' });
    expect(outputProblems(json('{"a": 1, "b": [{"c": "x"}]}'), '{"z":0}{"a":2,"b":[{"c":"y","d":1}]}')).toEqual([]);
    expect(outputProblems(json('{"a": 1, "b": [{"c": "x"}]}'), '{"a":"2","b":[]}')).toEqual([
      'x.md:1: $.a: a number in the docs, string',
      'x.md:1: $.b: items in the docs, none here',
    ]);
    expect(outputProblems(table('NAME  AGE\nm1    4m'), 'NAME AGE\nm1 12s\n')).toEqual([]);
    expect(outputProblems(table('m1 Running'), 'm1 Deploying\n')).toHaveLength(1);
  });
});

describe('the code blocks of README.md and docs/', () => {
  it('are found in every page', () => {
    expect(docFiles().length).toBeGreaterThan(20);
    expect(blocks.length).toBeGreaterThan(50);
  });

  it('each say how they are run', () => {
    const uncovered = blocks.filter((b) => b.runner === undefined).map(where);
    expect(uncovered, 'put <!-- run: RUNNER --> on the line before each block (e2e/support/docs-blocks.ts)').toEqual(
      [],
    );
  });

  it('that are not run say why, and are listed here', () => {
    const notRun = blocks.filter((b) => b.runner === 'no');
    for (const b of notRun) expect(b.args, where(b)).toMatch(/^\(.{10,}\)$/);
    console.log(`blocks not run (${notRun.length}):\n${notRun.map((b) => `  ${where(b)} ${b.args}`).join('\n')}`);
    const counts = new Map<string, number>();
    for (const b of blocks) counts.set(b.runner ?? 'none', (counts.get(b.runner ?? 'none') ?? 0) + 1);
    console.log(`blocks per runner: ${[...counts].map(([r, n]) => `${r} ${n}`).join(', ')}`);
  });

  it('show output only after a block that runs', () => {
    for (const [i, b] of blocks.entries()) {
      if (b.runner !== 'output') continue;
      const before = blocks[i - 1];
      expect(before?.file, where(b)).toBe(b.file);
      expect(['standalone', 'cluster'], where(b)).toContain(before?.runner);
    }
  });

  it('run shell or TypeScript, or write the files the next blocks use', () => {
    for (const b of blocks.filter((x) => x.runner === 'standalone' || x.runner === 'cluster')) {
      const file = option(b, 'file');
      if (file) expect(file, where(b)).toMatch(/^~\/[\w./-]+$/);
      else expect(['sh', 'bash', ...(b.runner === 'standalone' ? ['ts'] : [])], where(b)).toContain(b.lang);
    }
    for (const b of blocks.filter((x) => x.runner === 'diagram'))
      expect(['text', 'mermaid'], where(b)).toContain(b.lang);
  });

  it('hold manifests that pass the CRD validators (defaults, patterns, CEL rules)', () => {
    const manifests: Array<[Block, string]> = [];
    for (const b of blocks) {
      if (b.runner === 'validate') manifests.push([b, b.text]);
      else if (b.runner === 'standalone' || b.runner === 'cluster') {
        if (option(b, 'file') && b.lang === 'yaml') manifests.push([b, b.text]);
        for (const doc of hereDocuments(b.text)) if (isManifest(doc)) manifests.push([b, doc]);
      }
    }
    expect(manifests.length).toBeGreaterThan(10);
    for (const [b, text] of manifests.filter(([x]) => x.lang !== 'json'))
      expect(manifestProblems(text), where(b)).toEqual([]);
    for (const b of blocks.filter((x) => x.runner === 'validate')) expect(['yaml', 'json'], where(b)).toContain(b.lang);
  });

  it('hold AWS policies exactly as the operator renders them', () => {
    const policies = blocks.filter((b) => b.runner === 'validate' && b.lang === 'json');
    expect(policies.length).toBeGreaterThan(0);
    const rendered = [
      bedrockPermissionPolicy(PLACEHOLDERS['<ACCOUNT_ID>'] ?? ''),
      roleTrustPolicy(PLACEHOLDERS['<GATEWAY_PRINCIPAL_ARN>'] ?? ''),
    ];
    for (const b of policies) expect(rendered, where(b)).toContainEqual(JSON.parse(fillPlaceholders(b.text)));
  });

  it('hold alerts on metrics that exist', async () => {
    const exported = await exportedMetrics();
    const rules = blocks.filter((b) => b.runner === 'prometheus');
    expect(rules.length).toBeGreaterThan(0);
    let checked = 0;
    for (const b of rules) {
      const doc = yaml.load(b.text) as { spec: { groups: Array<{ rules: Array<{ alert: string; expr: string }> }> } };
      for (const rule of doc.spec.groups.flatMap((g) => g.rules)) {
        for (const name of metricNames(rule.expr)) {
          expect(
            exported.has(name) || exported.has(name.replace(/_(bucket|sum|count)$/, '')),
            `${rule.alert}: ${name}`,
          ).toBe(true);
          checked++;
        }
      }
    }
    expect(checked).toBeGreaterThan(5);
  });

  it('hold Helm values that the chart schema accepts', () => {
    const chart = join(ROOT, 'charts/platform-ai-optimizer');
    // Helm validates with the schema's own rules; its $schema names draft-07 by an address ajv does not alias.
    const { $schema: _draft, ...schema } = JSON.parse(readFileSync(join(chart, 'values.schema.json'), 'utf8')) as {
      $schema?: string;
    };
    const defaults = yaml.load(readFileSync(join(chart, 'values.yaml'), 'utf8'));
    const validate = new Ajv({ allErrors: true, strict: false }).compile(schema);
    const values = blocks.filter((b) => b.runner === 'values');
    expect(values.length).toBeGreaterThan(0);
    for (const b of values) {
      const ok = validate(deepMerge(defaults, yaml.load(b.text)));
      expect(validate.errors ?? [], where(b)).toEqual([]);
      expect(ok, where(b)).toBe(true);
    }
  });

  it('give every placeholder a value the runners put in', () => {
    for (const b of blocks.filter((x) => x.runner && RUNNABLE.has(x.runner) && x.lang !== 'ts')) {
      for (const p of placeholdersIn(b.text)) expect(Object.keys(PLACEHOLDERS), `${where(b)} ${p}`).toContain(p);
    }
  });
});

/** Names of metrics in a PromQL expression: outside label matchers and grouping clauses, not functions. */
function metricNames(expr: string): string[] {
  const FUNCTIONS = new Set(['sum', 'rate', 'increase', 'histogram_quantile', 'max', 'avg', 'min']);
  const bare = expr
    .replace(/\{[^}]*\}/g, '')
    .replace(/\b(by|without)\s*\([^)]*\)/g, '')
    .replace(/\[[^\]]*\]/g, '');
  return (bare.match(/[a-z_][a-z0-9_]*/g) ?? []).filter((n) => !FUNCTIONS.has(n) && n.includes('_'));
}

/** Every metric the proxy and the operator register, as the dashboard's test reads them. */
async function exportedMetrics(): Promise<Set<string>> {
  const proxy = new ProxyMetrics();
  proxy.collectProcessMetrics();
  const operator = new Registry();
  new ControllerMetrics(operator);
  return new Set(
    [await proxy.registry.metrics(), await operator.metrics()]
      .join('\n')
      .split('\n')
      .filter((l) => l.startsWith('# TYPE '))
      .map((l) => l.split(' ')[2] ?? ''),
  );
}

/** The flags of a `parseArgs` call's options in an entry point, and the variables their defaults read. */
function flagsOf(file: string): { flags: string[]; variables: string[] } {
  const text = readFileSync(join(ROOT, file), 'utf8');
  const src = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const flags: string[] = [];
  const variables: string[] = [];
  const visit = (n: ts.Node): void => {
    if (ts.isCallExpression(n) && n.expression.getText(src) === 'parseArgs') {
      const arg = n.arguments[0];
      const options =
        arg && ts.isObjectLiteralExpression(arg)
          ? arg.properties.find((p) => p.name?.getText(src) === 'options')
          : undefined;
      if (options && ts.isPropertyAssignment(options) && ts.isObjectLiteralExpression(options.initializer)) {
        for (const p of options.initializer.properties) {
          flags.push(`--${(p.name?.getText(src) ?? '').replace(/'/g, '')}`);
          variables.push(...[...p.getText(src).matchAll(/process\.env\.([A-Z0-9_]+)/g)].map((m) => m[1] ?? ''));
        }
      }
    }
    ts.forEachChild(n, visit);
  };
  visit(src);
  return { flags, variables };
}

describe('the pages', () => {
  it.each([
    ['proxy/main.ts', 'docs/reference/proxy.md'],
    ['operator/main.ts', 'docs/reference/operator.md'],
  ])("%s's flags and their variables are all in %s", (entry, page) => {
    const { flags, variables } = flagsOf(entry);
    expect(flags.length).toBeGreaterThan(10);
    const text = readFileSync(join(ROOT, page), 'utf8');
    const documented = new Set([...text.matchAll(/`(--[a-z-]+)[ `]/g)].map((m) => m[1]));
    expect(flags.filter((f) => !documented.has(f))).toEqual([]);
    expect([...documented].filter((f) => f && !flags.includes(f))).toEqual([]);
    expect(variables.filter((v) => !text.includes(`\`${v}\``))).toEqual([]);
  });

  it('name only repository paths that exist', () => {
    const missing = docFiles().flatMap((f) =>
      namedPaths(f, readFileSync(join(ROOT, f), 'utf8'))
        .filter((p) => !existsSync(join(ROOT, p)))
        .map((p) => `${f}: ${p}`),
    );
    const inDiagrams = blocks
      .filter((b) => b.runner === 'diagram')
      .flatMap((b) =>
        [...b.text.matchAll(/\b((?:crds|proxy|operator|charts|e2e)\/[\w./-]+\.\w+)/g)]
          .map((m) => m[1] ?? '')
          .filter((p) => !existsSync(join(ROOT, p)))
          .map((p) => `${where(b)}: ${p}`),
      );
    expect([...missing, ...inDiagrams]).toEqual([]);
  });

  it('keep the README an overview', () => {
    expect(readFileSync(join(ROOT, 'README.md'), 'utf8').split('\n').length).toBeLessThanOrEqual(250);
  });

  it('troubleshooting names every error code a caller can get', () => {
    const page = readFileSync(join(ROOT, 'docs/operations/troubleshooting.md'), 'utf8');
    const missing = [...codesInCode(), ...REFUSAL_CODES].filter((c) => !page.includes(`\`${c}\``)).sort();
    expect(missing, 'add a row for each to docs/operations/troubleshooting.md').toEqual([]);
  });

  it("each provider has a page carrying its provider's generated error table", () => {
    for (const provider of Object.keys(PROVIDERS)) {
      const page = join(ROOT, `docs/providers/${provider}.md`);
      expect(existsSync(page), `docs/providers/${provider}.md`).toBe(true);
      expect(readFileSync(page, 'utf8'), provider).toContain(`<!-- generated: errors ${provider} -->`);
    }
  });
});
