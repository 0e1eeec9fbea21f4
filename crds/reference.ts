import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { API_GROUP_VERSION, type KindName } from './constants.js';
import { AWS_ERROR_RULES } from './providers/aws-errors.js';
import type { ErrorRule } from './providers/provider.js';
import { PROVIDERS } from './providers/table.js';
import { type CelRule, type CrdManifest, crdManifest, type JsonSchema, KIND_NAMES } from './schema.js';

/**
 * What docs/ holds that is generated from the code's own data, so that it cannot drift:
 * docs/reference/crds.md from the CRD manifests (the source of truth: every field with its
 * type, default, enum, pattern, bounds and description, every CEL rule with its message, the
 * printer columns and subresources), and each provider page's error table from the provider's
 * error rules (between `<!-- generated: errors <provider> -->` and `<!-- end generated -->`).
 * `npm run docs:reference` writes them; a unit test fails when a checked-in page differs from
 * what this renders now.
 */

export const REFERENCE_FILE = 'docs/reference/crds.md';
export const REFERENCE_COMMAND = 'npm run docs:reference';

interface Version {
  subresources?: { status?: unknown; scale?: { specReplicasPath: string; statusReplicasPath: string } };
  additionalPrinterColumns?: Array<{ name: string; type: string; jsonPath: string; priority?: number }>;
}

/** Text for a table cell: one line, pipes escaped. */
const cell = (text: string): string => text.replace(/\s+/g, ' ').replace(/\|/g, '\\|').trim();
const code = (text: string): string => `\`${text.replace(/\|/g, '\\|')}\``;

function typeOf(s: JsonSchema): string {
  if (s.type === 'array') return `[]${s.items ? typeOf(s.items) : 'any'}`;
  if (s.type === 'object' && typeof s.additionalProperties === 'object')
    return `map[string]${typeOf(s.additionalProperties)}`;
  return s.format ? `${s.type ?? 'any'} (${s.format})` : (s.type ?? 'any');
}

/** The constraints of a field, in the API server's terms. */
function constraints(s: JsonSchema): string[] {
  const out: string[] = [];
  if (s.enum) out.push(`one of ${s.enum.map((v) => code(JSON.stringify(v))).join(', ')}`);
  if (s.pattern) out.push(`pattern ${code(s.pattern)}`);
  if (s.minimum !== undefined) out.push(`>= ${s.minimum}`);
  if (s.maximum !== undefined) out.push(`<= ${s.maximum}`);
  if (s.minLength !== undefined) out.push(`length >= ${s.minLength}`);
  if (s.maxLength !== undefined) out.push(`length <= ${s.maxLength}`);
  if (s.minItems !== undefined) out.push(`items >= ${s.minItems}`);
  if (s.maxItems !== undefined) out.push(`items <= ${s.maxItems}`);
  if (s.maxProperties !== undefined) out.push(`entries <= ${s.maxProperties}`);
  const listType = s['x-kubernetes-list-type'];
  if (listType === 'set') out.push('unique items');
  if (listType === 'map') out.push(`unique by ${(s['x-kubernetes-list-map-keys'] ?? []).map(code).join(', ')}`);
  return out;
}

interface Row {
  path: string;
  schema: JsonSchema;
  required: boolean;
}

/** Every field under `schema`, depth first in the manifest's order; array items as `path[]`. */
function rows(schema: JsonSchema, path: string, out: Row[]): Row[] {
  const children = schema.type === 'array' ? schema.items?.properties : schema.properties;
  const required = new Set((schema.type === 'array' ? schema.items?.required : schema.required) ?? []);
  const prefix = schema.type === 'array' ? `${path}[]` : path;
  for (const [name, child] of Object.entries(children ?? {})) {
    const childPath = prefix ? `${prefix}.${name}` : name;
    out.push({ path: childPath, schema: child, required: required.has(name) });
    rows(child, childPath, out);
  }
  return out;
}

/** CEL rules of a schema node and its descendants, with the field each one is written on. */
function celRules(schema: JsonSchema, path: string, out: Array<{ at: string; rule: CelRule }>) {
  for (const rule of schema['x-kubernetes-validations'] ?? []) out.push({ at: path || '(object)', rule });
  if (schema.type === 'array' && schema.items) celRules(schema.items, `${path}[]`, out);
  if (typeof schema.additionalProperties === 'object') celRules(schema.additionalProperties, `${path}{}`, out);
  for (const [name, child] of Object.entries(schema.properties ?? {}))
    celRules(child, path ? `${path}.${name}` : name, out);
  return out;
}

/**
 * A part's fields and rules; `objectRules` are the object's own rules on this part's fields
 * (only a rule on the whole object may read metadata.name).
 */
function fieldTable(
  title: string,
  schema: JsonSchema | undefined,
  root: string,
  objectRules: CelRule[] = [],
): string[] {
  if (!schema) return [];
  const lines = [`### ${title}`, ''];
  if (schema.description) lines.push(cell(schema.description), '');
  const all = rows(schema, root, []);
  if (all.length > 0) {
    lines.push('| Field | Type | Required | Default | Validation | Description |', '|---|---|---|---|---|---|');
    for (const r of all) {
      const dflt = r.schema.default === undefined ? '' : code(JSON.stringify(r.schema.default));
      lines.push(
        `| ${code(r.path)} | ${cell(typeOf(r.schema))} | ${r.required ? 'yes' : ''} | ${dflt} | ${cell(constraints(r.schema).join('; '))} | ${cell(r.schema.description ?? '')} |`,
      );
    }
    lines.push('');
  }
  const rules = [...objectRules.map((rule) => ({ at: '', rule })), ...celRules(schema, root, [])];
  if (rules.length > 0) {
    lines.push('Rules (CEL, checked by the API server and by `npm run validate`):', '');
    lines.push('| On | Rule | Message |', '|---|---|---|');
    for (const { at, rule } of rules) {
      const where = rule.fieldPath ? `${at}${rule.fieldPath}`.replace(/^\./, '') : at;
      lines.push(`| ${code(where)} | ${code(rule.rule)} | ${cell(rule.message ?? rule.messageExpression ?? '')} |`);
    }
    lines.push('');
  }
  return lines;
}

function kindSection(kind: KindName): string[] {
  const crd: CrdManifest = crdManifest(kind);
  const version = crd.spec.versions.find((v) => v.storage) ?? crd.spec.versions[0];
  if (!version) throw new Error(`${crd.metadata.name} has no version`);
  const extra = version as Version;
  const schema = version.schema.openAPIV3Schema;
  const names = crd.spec.names;
  const lines = [`## ${names.kind}`, ''];
  if (schema.description) lines.push(cell(schema.description), '');
  const sub = [
    extra.subresources?.status ? '`status`' : '',
    extra.subresources?.scale
      ? `\`scale\` (${code(extra.subresources.scale.specReplicasPath)}, ${code(extra.subresources.scale.statusReplicasPath)})`
      : '',
  ].filter(Boolean);
  lines.push(
    '| | |',
    '|---|---|',
    `| API | ${code(`${API_GROUP_VERSION}`)}, kind ${code(names.kind)} |`,
    `| CRD | ${code(crd.metadata.name)} (\`crds/${crd.metadata.name.replace(/^([^.]+)\.(.+)$/, '$2_$1')}.yaml\`) |`,
    `| Scope | ${crd.spec.scope} |`,
    `| Names | ${[names.plural, names.singular, ...(names.shortNames ?? [])].map(code).join(', ')} |`,
    `| Categories | ${(names.categories ?? []).map(code).join(', ')} |`,
    `| Subresources | ${sub.join(', ')} |`,
    '',
  );
  const columns = extra.additionalPrinterColumns ?? [];
  if (columns.length > 0) {
    lines.push('`kubectl get` columns (`-o wide` adds those of priority 1):', '');
    lines.push('| Column | Type | From | Priority |', '|---|---|---|---|');
    for (const c of columns) lines.push(`| ${c.name} | ${c.type} | ${code(c.jsonPath)} | ${c.priority ?? 0} |`);
    lines.push('');
  }
  const onSpec = (schema['x-kubernetes-validations'] ?? []).filter((r) => r.fieldPath?.startsWith('.spec'));
  lines.push(...fieldTable(`${names.kind} spec`, schema.properties?.spec, 'spec', onSpec));
  lines.push(...fieldTable(`${names.kind} status`, schema.properties?.status, 'status'));
  return lines;
}

/** The whole reference page, as `npm run docs:reference` writes it. */
export function renderReference(): string {
  const lines = [
    '<!-- Generated by crds/reference.ts from crds/ai.platform_*.yaml: do not edit; run `npm run docs:reference`. -->',
    '',
    '# CRD reference',
    '',
    `Group ${code(API_GROUP_VERSION.split('/')[0] ?? '')}, version ${code(API_GROUP_VERSION.split('/')[1] ?? '')}. Generated from the CRD manifests in \`crds/\`, which the API server, \`npm run validate\` and the standalone gateway all validate with. Examples: \`crds/examples/\`; one rejected example per rule: \`crds/examples/invalid/\`.`,
    '',
    ...KIND_NAMES.map((k) => `- [${k}](#${k.toLowerCase()})`),
    '',
  ];
  for (const kind of KIND_NAMES) lines.push(...kindSection(kind));
  return `${lines
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .trimEnd()}\n`;
}

/** A rule's message with its placeholders in words: the table shows the pattern, not one instance. */
function words(message: string, provider: string): string {
  return message
    .replaceAll('{provider}', provider)
    .replaceAll('{subject}', 'the model')
    .replaceAll('{model}', 'the model')
    .replaceAll('{region}', 'the region')
    .replaceAll('{code}', 'AWS error code')
    .replaceAll('{action}', 'the action')
    .replaceAll('{status}', 'status')
    .replaceAll('{detail}', '');
}

const statuses = (s: number | readonly number[] | undefined): string =>
  s === undefined ? 'any' : typeof s === 'number' ? String(s) : s.join(', ');

function hostedRows(rules: readonly ErrorRule[], label: string): string[] {
  return rules.map((r) => {
    const when = [
      `${statuses(r.status)}`,
      r.kind ? `error ${code(r.kind.source)}` : '',
      r.text ? `message ${code(r.text.source)}` : '',
    ].filter(Boolean);
    const p = r.problem;
    return `| ${when.join(', ')} | ${code(p.reason)}${p.credentials ? ' (credentials)' : ''} | ${p.status} ${code(p.code)} | ${cell(words(p.message, label))} |`;
  });
}

function awsRows(): string[] {
  return AWS_ERROR_RULES.map((r) => {
    const when = [
      r.codes ? r.codes.map(code).join(', ') : '',
      r.httpStatus ? `HTTP ${r.httpStatus}` : '',
      r.auth ? `${r.auth} providers` : '',
      r.stages ? `while ${r.stages.map((s) => (s === 'invoke' ? 'calling a model' : `getting ${s}`)).join(', ')}` : '',
      r.text ? `message ${code(r.text.source)}` : '',
    ]
      .filter(Boolean)
      .join(', ')
      .replace('getting discovery', 'listing models');
    const p = r.problem;
    return `| ${when || 'anything else'} | ${code(p.reason)}${p.credentials ? ' (credentials)' : ''} | ${p.status} ${code(p.code)} | ${cell(words(p.message, 'Bedrock'))} |`;
  });
}

/** The error table of one provider (`bedrock` or a hosted type), first matching row wins. */
export function renderErrorTable(provider: string): string {
  const module = Object.hasOwn(PROVIDERS, provider) ? PROVIDERS[provider as keyof typeof PROVIDERS] : undefined;
  if (!module) throw new Error(`no error table for provider ${provider}`);
  // Bedrock's table is AWS's codes (aws-errors.ts); the others' HTTP statuses.
  const hosted = module.errors;
  const head = hosted
    ? ['| Provider answers | Condition reason | Caller gets | Cause and fix |', '|---|---|---|---|']
    : ['| AWS says | Condition reason | Caller gets | Cause and fix |', '|---|---|---|---|'];
  return [...head, ...(hosted ? hostedRows(hosted, module.label) : awsRows())].join('\n');
}

const SECTION = /(<!-- generated: errors ([a-z-]+) -->\n)[\s\S]*?(<!-- end generated -->)/g;

/** A page with each generated section rendered anew. */
export function fillGenerated(markdown: string): string {
  return markdown.replace(SECTION, (_all, open: string, provider: string, close: string) =>
    [open, renderErrorTable(provider), '\n', close].join(''),
  );
}

/** Every docs/ page, repository-relative, with what it should hold now. */
function expectedPages(root: string): Array<{ file: string; now: string; want: string }> {
  const pages = readdirSync(join(root, 'docs'), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.md'))
    .map((f) => join('docs', f))
    .sort();
  return pages.map((file) => {
    const now = readFileSync(join(root, file), 'utf8');
    return { file, now, want: file === REFERENCE_FILE ? renderReference() : fillGenerated(now) };
  });
}

/** The generated pages that differ from what the code renders now (empty when all are current). */
export function staleGeneratedPages(root: string): string[] {
  let missing: string[] = [];
  try {
    readFileSync(join(root, REFERENCE_FILE));
  } catch {
    missing = [REFERENCE_FILE];
  }
  return [...missing, ...expectedPages(root).flatMap((p) => (p.now === p.want ? [] : [p.file]))];
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  writeFileSync(REFERENCE_FILE, renderReference());
  for (const p of expectedPages('.')) if (p.now !== p.want) writeFileSync(p.file, p.want);
  console.log(`wrote ${REFERENCE_FILE} and the generated sections of docs/`);
}
