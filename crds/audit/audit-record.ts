import { Ajv } from 'ajv';

/**
 * One audit record, as the operator sends it to the proxies and as GET /v1/audit answers it:
 * who did what to which object, before and after (secrets redacted), when and from where. The
 * operator records the Kubernetes changes to the ai.platform kinds; the proxies record sign-ins,
 * refusals and denied admin actions.
 */

const AUDIT_ACTIONS = ['created', 'updated', 'deleted', 'signed-in', 'signed-out', 'refused', 'denied'] as const;
export type AuditAction = (typeof AUDIT_ACTIONS)[number];

const ACTOR_KINDS = ['user', 'service-account', 'api-key', 'token', 'anonymous', 'unknown'] as const;
type ActorKind = (typeof ACTOR_KINDS)[number];

export interface AuditActor {
  kind: ActorKind;
  /** A Kubernetes user or ServiceAccount (namespace:name), an ApiKey's name, a token's subject (its name, or a hash). */
  name: string;
  /** A Kubernetes user's groups, as the API server authenticated them. */
  groups?: string[];
}

export interface AuditTarget {
  /** A kind of ai.platform, or what the gateway guards: `Route` (an API path), `Session` (the pages'). */
  kind: string;
  namespace?: string;
  name: string;
}

export interface AuditRecord {
  /** Unique per change (an object's uid and resourceVersion; a gateway event's own): a record sent twice is kept once. */
  id: string;
  /** ISO 8601. */
  at: string;
  source: 'kubernetes' | 'gateway';
  action: AuditAction;
  actor: AuditActor;
  target: AuditTarget;
  /** The team the target belongs to (an ApiKey's), or the caller's: a User reads its own team's records. */
  team?: string;
  /** Where from: the field manager of a Kubernetes change (kubectl-edit, helm), the caller's address. */
  from?: string;
  /** The fields that changed (spec.budget.usd, metadata.labels...). */
  changed?: string[];
  before?: unknown;
  after?: unknown;
  /** A refusal's or denial's code (expired_token, admin_only...). */
  reason?: string;
  /** Refusals of one caller, code and minute are one record: how many. */
  count?: number;
}

/** At most this many records in one POST /v1/audit. */
export const MAX_AUDIT_BATCH = 500;

const text = (maxLength: number) => ({ type: 'string', maxLength }) as const;

const RECORD_SCHEMA = {
  type: 'array',
  maxItems: MAX_AUDIT_BATCH,
  items: {
    type: 'object',
    additionalProperties: false,
    required: ['id', 'at', 'source', 'action', 'actor', 'target'],
    properties: {
      id: { ...text(200), minLength: 1 },
      at: { type: 'string', format: 'date-time' },
      source: { type: 'string', enum: ['kubernetes', 'gateway'] },
      action: { type: 'string', enum: [...AUDIT_ACTIONS] },
      actor: {
        type: 'object',
        additionalProperties: false,
        required: ['kind', 'name'],
        properties: {
          kind: { type: 'string', enum: [...ACTOR_KINDS] },
          name: text(300),
          groups: { type: 'array', maxItems: 50, items: text(300) },
        },
      },
      target: {
        type: 'object',
        additionalProperties: false,
        required: ['kind', 'name'],
        properties: { kind: text(100), namespace: { ...text(253) }, name: text(300) },
      },
      team: { ...text(253) },
      from: { ...text(300) },
      changed: { type: 'array', maxItems: 200, items: text(300) },
      before: {},
      after: {},
      reason: { ...text(100) },
      count: { type: 'integer', minimum: 1 },
    },
  },
};

const ajv = new Ajv({ allErrors: false });
// date-time only, without ajv-formats' whole table: an ISO instant, as Date.toISOString writes it.
ajv.addFormat('date-time', (s: string) => /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/.test(s));
const validate = ajv.compile<AuditRecord[]>(RECORD_SCHEMA);

/** The records of a POST body, or what is wrong with it (ajv's first error, with its path). */
export function parseAuditRecords(body: unknown): AuditRecord[] | string {
  if (validate(body)) return body;
  const e = validate.errors?.[0];
  return `audit records: ${e?.instancePath || '/'} ${e?.message ?? 'is not valid'}`;
}
