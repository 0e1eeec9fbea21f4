import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import yaml from 'js-yaml';
import { API_GROUP, API_VERSION, KINDS, type KindName } from './constants.js';

/** A CEL rule as written under x-kubernetes-validations. */
export interface CelRule {
  rule: string;
  message?: string;
  messageExpression?: string;
  fieldPath?: string;
  reason?: 'FieldValueInvalid' | 'FieldValueForbidden' | 'FieldValueRequired' | 'FieldValueDuplicate';
}

/** The subset of OpenAPI v3 (structural, as Kubernetes accepts it) the CRDs use. */
export interface JsonSchema {
  type?: 'object' | 'array' | 'string' | 'integer' | 'number' | 'boolean';
  description?: string;
  properties?: Record<string, JsonSchema>;
  additionalProperties?: JsonSchema | boolean;
  items?: JsonSchema;
  required?: string[];
  default?: unknown;
  enum?: unknown[];
  pattern?: string;
  format?: string;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
  maxProperties?: number;
  'x-kubernetes-validations'?: CelRule[];
  'x-kubernetes-list-type'?: 'atomic' | 'set' | 'map';
  'x-kubernetes-list-map-keys'?: string[];
}

interface PrinterColumn {
  name: string;
  type: string;
  jsonPath: string;
  priority?: number;
}

/** A CustomResourceDefinition manifest as stored in this folder. */
export interface CrdManifest {
  apiVersion: 'apiextensions.k8s.io/v1';
  kind: 'CustomResourceDefinition';
  metadata: { name: string; labels?: Record<string, string> };
  spec: {
    group: string;
    scope: 'Namespaced' | 'Cluster';
    names: {
      kind: string;
      listKind: string;
      plural: string;
      singular: string;
      shortNames?: string[];
      categories?: string[];
    };
    versions: Array<{
      name: string;
      served: boolean;
      storage: boolean;
      subresources?: { status?: Record<string, never> };
      additionalPrinterColumns?: PrinterColumn[];
      schema: { openAPIV3Schema: JsonSchema };
    }>;
  };
}

/** Path of the CRD manifest of a kind: `<group>_<plural>.yaml` beside this module. */
function crdFile(kind: KindName): string {
  return fileURLToPath(new URL(`./${API_GROUP}_${KINDS[kind].plural}.yaml`, import.meta.url));
}

const cache = new Map<KindName, CrdManifest>();

/** The parsed CRD manifest of a kind (read once). */
export function crdManifest(kind: KindName): CrdManifest {
  let crd = cache.get(kind);
  if (!crd) {
    crd = yaml.load(readFileSync(crdFile(kind), 'utf8')) as CrdManifest;
    cache.set(kind, crd);
  }
  return crd;
}

/** The OpenAPI v3 schema of the served version of a kind. */
export function openApiSchema(kind: KindName): JsonSchema {
  const version = crdManifest(kind).spec.versions.find((v) => v.name === API_VERSION);
  if (!version) throw new Error(`${crdFile(kind)} does not define version ${API_VERSION}`);
  return version.schema.openAPIV3Schema;
}

export const KIND_NAMES = Object.keys(KINDS) as KindName[];
