import { parse as parseCel } from '@marcbachmann/cel-js';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import ajvFormats from 'ajv-formats';
import type { ApiKey } from './api-key.js';
import type { AutoscalerPolicy } from './autoscaler-policy.js';
import type { Budget } from './budget.js';
import { API_GROUP_VERSION, KINDS, type KindName } from './constants.js';
import type { ExternalProvider } from './external-provider.js';
import type { Guardrail } from './guardrail.js';
import type { McpServer } from './mcp-server.js';
import type { ModelDeployment } from './model-deployment.js';
import type { NodeConfiguration } from './node-configuration.js';
import type { NodeTemplate } from './node-template.js';
import { type CelRule, type JsonSchema, KIND_NAMES, openApiSchema } from './schema.js';

/**
 * Validators compiled from the CRD manifests, for code paths that do not go through the
 * API server (the proxy's standalone config files). They behave like the API server:
 * schema defaults are applied, unknown fields are rejected (kubectl's strict field
 * validation), and the x-kubernetes-validations CEL rules are evaluated, transition rules
 * (those reading oldSelf) only when an old object is given.
 */

type PlatformResource =
  | ModelDeployment
  | ExternalProvider
  | NodeTemplate
  | NodeConfiguration
  | AutoscalerPolicy
  | ApiKey
  | Budget
  | McpServer
  | Guardrail;

export interface ValidationIssue {
  /** Dotted path of the offending field, as the API server reports it (e.g. spec.auth.roleArn). */
  field: string;
  message: string;
}

export type ValidationResult = { ok: true; resource: PlatformResource } | { ok: false; issues: ValidationIssue[] };

/** What an ajv `compile` keyword returns: a data validator that reports through `.errors`. */
interface DataValidator {
  (data: unknown, cxt?: { instancePath: string }): boolean;
  errors?: Partial<ErrorObject>[];
}

interface CompiledRule extends CelRule {
  evaluate: (context: Record<string, unknown>) => unknown;
  transition: boolean;
}

/** Old object of the update being validated; set only for the duration of one validate call. */
let currentOld: unknown;

function valueAt(root: unknown, pointer: string): { found: boolean; value?: unknown } {
  let node = root;
  for (const raw of pointer.split('/').slice(1)) {
    const key = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    if (node === null || typeof node !== 'object' || Array.isArray(node) || !(key in node)) {
      return { found: false };
    }
    node = (node as Record<string, unknown>)[key];
  }
  return { found: true, value: node };
}

function celKeyword(rules: CelRule[]): DataValidator {
  const compiled: CompiledRule[] = rules.map((r) => ({
    ...r,
    evaluate: parseCel(r.rule),
    transition: /\boldSelf\b/.test(r.rule),
  }));
  const validate: DataValidator = (data, cxt) => {
    const errors: Partial<ErrorObject>[] = [];
    const pointer = cxt?.instancePath ?? '';
    for (const rule of compiled) {
      const context: Record<string, unknown> = { self: data };
      if (rule.transition) {
        // Like the API server: transition rules run only on updates where the old value exists.
        const old = currentOld === undefined ? { found: false } : valueAt(currentOld, pointer);
        if (!old.found) continue;
        context.oldSelf = old.value;
      }
      let passed: unknown;
      try {
        passed = rule.evaluate(context);
      } catch (err) {
        passed = false;
        errors.push({
          message: `rule "${rule.rule}" could not be evaluated: ${(err as Error).message}`,
          params: { fieldPath: rule.fieldPath ?? '' },
        });
        continue;
      }
      if (passed !== true) {
        errors.push({
          message: rule.message ?? `failed rule: ${rule.rule}`,
          params: { fieldPath: rule.fieldPath ?? '' },
        });
      }
    }
    validate.errors = errors;
    return errors.length === 0;
  };
  return validate;
}

function listTypeKeyword(listType: string, parent: JsonSchema): DataValidator {
  const mapKeys = parent['x-kubernetes-list-map-keys'] ?? [];
  const validate: DataValidator = (data, cxt) => {
    if (!Array.isArray(data) || listType === 'atomic') return true;
    const seen = new Set<string>();
    for (const [index, item] of data.entries()) {
      const identity =
        listType === 'set'
          ? JSON.stringify(item)
          : JSON.stringify(mapKeys.map((k) => (item as Record<string, unknown>)?.[k] ?? null));
      if (seen.has(identity)) {
        validate.errors = [
          {
            // Point at the repeated entry, as the API server does (spec.models[1]).
            instancePath: `${cxt?.instancePath ?? ''}/${index}`,
            message:
              listType === 'set'
                ? `duplicate entry ${identity}`
                : `duplicate entry with ${mapKeys.join(', ')} = ${identity}`,
          },
        ];
        return false;
      }
      seen.add(identity);
    }
    return true;
  };
  return validate;
}

/**
 * Kubernetes prunes unknown fields and `kubectl apply` rejects them (strict field
 * validation); we reject them too, so a typo in a standalone config is an error and not a
 * silently ignored setting.
 */
function closeObjects(schema: JsonSchema, isRoot = true): JsonSchema {
  const out: JsonSchema = { ...schema };
  if (out.properties) {
    out.properties = Object.fromEntries(
      Object.entries(out.properties).map(([k, v]) =>
        // ObjectMeta is checked by the API server itself; its schema here only narrows the name.
        [k, isRoot && k === 'metadata' ? v : closeObjects(v, false)],
      ),
    );
    if (out.additionalProperties === undefined) out.additionalProperties = false;
  }
  if (out.items) out.items = closeObjects(out.items, false);
  if (typeof out.additionalProperties === 'object') {
    out.additionalProperties = closeObjects(out.additionalProperties, false);
  }
  return out;
}

function createAjv(): Ajv {
  const ajv = new Ajv({ allErrors: true, useDefaults: true, strict: true, strictTypes: false });
  // ajv-formats is CommonJS; under NodeNext its plugin function is the `default` member.
  ajvFormats.default(ajv);
  ajv.addFormat('int32', {
    type: 'number',
    validate: (n: number) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31,
  });
  ajv.addFormat('int64', { type: 'number', validate: (n: number) => Number.isSafeInteger(n) });
  ajv.addKeyword({
    keyword: 'x-kubernetes-validations',
    schemaType: 'array',
    errors: true,
    compile: (rules: CelRule[]) => celKeyword(rules),
  });
  ajv.addKeyword({
    keyword: 'x-kubernetes-list-type',
    schemaType: 'string',
    errors: true,
    compile: (listType: string, parent) => listTypeKeyword(listType, parent as JsonSchema),
  });
  ajv.addKeyword({ keyword: 'x-kubernetes-list-map-keys', schemaType: 'array' });
  return ajv;
}

const ajv = createAjv();
const validators = new Map<KindName, ValidateFunction>();

function validatorFor(kind: KindName): ValidateFunction {
  let validate = validators.get(kind);
  if (!validate) {
    validate = ajv.compile(closeObjects(openApiSchema(kind)));
    validators.set(kind, validate);
  }
  return validate;
}

function fieldOf(err: ErrorObject): string {
  const segments = err.instancePath
    .split('/')
    .slice(1)
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
  let path = segments.reduce((acc, s) => (/^\d+$/.test(s) ? `${acc}[${s}]` : acc ? `${acc}.${s}` : s), '');
  const params = (err.params ?? {}) as Record<string, unknown>;
  if (typeof params.fieldPath === 'string' && params.fieldPath) path += params.fieldPath;
  if (err.keyword === 'required' && typeof params.missingProperty === 'string') {
    path = path ? `${path}.${params.missingProperty}` : params.missingProperty;
  }
  if (err.keyword === 'additionalProperties' && typeof params.additionalProperty === 'string') {
    path = path ? `${path}.${params.additionalProperty}` : params.additionalProperty;
  }
  return path.replace(/^\./, '') || '<root>';
}

function messageOf(err: ErrorObject): string {
  switch (err.keyword) {
    case 'required':
      return 'Required value';
    case 'additionalProperties':
      return 'field not declared in schema';
    case 'enum':
      return `Unsupported value: must be one of ${(err.params as { allowedValues: unknown[] }).allowedValues
        .map((v) => JSON.stringify(v))
        .join(', ')}`;
    default:
      return err.message ?? 'invalid';
  }
}

const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/** The kind of a document of this API, or undefined when it is not one. */
export function kindOf(doc: unknown): KindName | undefined {
  if (!isRecord(doc) || doc.apiVersion !== API_GROUP_VERSION) return undefined;
  return KIND_NAMES.find((k) => KINDS[k].kind === doc.kind);
}

/**
 * Validate one document of this API like the API server would, returning a defaulted copy.
 * Pass `old` to also evaluate transition rules (immutability) as on an update.
 */
export function validateResource(doc: unknown, options: { old?: unknown } = {}): ValidationResult {
  const kind = kindOf(doc);
  if (!kind || !isRecord(doc)) {
    const got = isRecord(doc) ? `${String(doc.apiVersion)} ${String(doc.kind)}` : typeof doc;
    return {
      ok: false,
      issues: [
        {
          field: 'kind',
          message: `not a resource of ${API_GROUP_VERSION} (${KIND_NAMES.join(', ')}); got ${got}`,
        },
      ],
    };
  }
  const copy = structuredClone(doc);
  const issues: ValidationIssue[] = [];
  const name = isRecord(copy.metadata) ? copy.metadata.name : undefined;
  if (typeof name !== 'string' || !DNS_SUBDOMAIN.test(name) || name.length > 253) {
    issues.push({
      field: 'metadata.name',
      message: 'Required value: a lowercase RFC 1123 subdomain (a-z, 0-9, "-" and ".")',
    });
  }
  const validate = validatorFor(kind);
  currentOld = options.old;
  try {
    // ajv fills defaults while it walks, and an object's CEL rules run before its properties are
    // walked: the first pass defaults, the second validates the defaulted copy, as the API server
    // (which defaults before it validates) does.
    validate(copy);
    validate(copy);
  } finally {
    currentOld = undefined;
  }
  for (const err of validate.errors ?? []) {
    issues.push({ field: fieldOf(err), message: messageOf(err) });
  }
  if (issues.length > 0) return { ok: false, issues };
  return { ok: true, resource: copy as unknown as PlatformResource };
}

/** One line per issue, `field: message`, for errors shown to people. */
export function formatIssues(issues: ValidationIssue[]): string {
  return issues.map((i) => `${i.field}: ${i.message}`).join('\n');
}
