import type { ProviderType } from './external-provider.js';
import type { CommonStatus, Resource } from './meta.js';

/** The built-in detectors' categories (crds/ai.platform_guardrails.yaml, spec.detectors.builtIn.categories). */
const BUILT_IN_CATEGORIES = [
  'Email',
  'Phone',
  'PaymentCard',
  'Iban',
  'NationalId',
  'IpAddress',
  'CloudCredential',
  'PrivateKey',
  'ApiToken',
] as const;

export type BuiltInCategory = (typeof BUILT_IN_CATEGORIES)[number];

const GUARDRAIL_ACTIONS = ['Block', 'Redact', 'Mask', 'RouteInCluster', 'Log'] as const;

export type GuardrailAction = (typeof GUARDRAIL_ACTIONS)[number];

/** What a guardrail checks. */
type GuardrailTarget = 'Request' | 'Answer';

export interface GuardrailSelector {
  apiKeys?: string[];
  teams?: string[];
  /** key:value */
  tags?: string[];
  models?: string[];
}

interface GuardrailPattern {
  /** The category of its findings (UpperCamelCase). */
  name: string;
  /** RE2 syntax. */
  regex: string;
}

/** A model judging a whole text: a chat model with a policy, or an embedding model over labelled examples. */
export interface GuardrailJudge {
  model: string;
  /** Default Chat. */
  kind?: 'Chat' | 'Classifier';
  policy?: string;
  examples?: { unsafe: string[]; safe: string[] };
  /** Default 0.6. */
  similarity?: number;
  /** Default Jailbreak. */
  category?: string;
  /** Default 3. */
  timeoutSeconds?: number;
  /** Default Allow. */
  onFailure?: 'Allow' | 'Block';
}

/**
 * An external service that gives verdicts on each text (crds/ai.platform_guardrails.yaml,
 * spec.detectors.services): exactly one of its kinds.
 */
export interface GuardrailService {
  /** Its detector's name in the status (service/<name>). */
  name: string;
  /** Bedrock's ApplyGuardrail, with a Bedrock ExternalProvider's region and credentials. */
  bedrockGuardrail?: { provider: string; identifier: string; version: string };
  /** OpenAI's moderations endpoint, with an OpenAI (or OpenAI-compatible) ExternalProvider's base URL and key. */
  openAIModeration?: { provider: string; model?: string };
  /** A Presidio analyzer's /analyze. */
  presidio?: { url: string; language?: string; entities?: string[]; scoreThreshold?: number };
  /** Default 3. */
  timeoutSeconds?: number;
  /** Default Allow. */
  onFailure?: 'Allow' | 'Block';
}

/** The ExternalProvider types whose base URL and credentials a service's kind calls with. */
export const SERVICE_PROVIDER_TYPES = {
  bedrockGuardrail: ['bedrock'],
  openAIModeration: ['openai', 'openai-compatible'],
} as const satisfies Partial<Record<keyof GuardrailService, readonly ProviderType[]>>;

export interface GuardrailSpec {
  selector?: GuardrailSelector;
  /** Default 100; ascending. */
  order?: number;
  /** Default [Request, Answer]. */
  appliesTo?: GuardrailTarget[];
  detectors: {
    builtIn?: { categories?: BuiltInCategory[]; phoneRegions?: string[] };
    patterns?: GuardrailPattern[];
    judge?: GuardrailJudge;
    services?: GuardrailService[];
  };
  /** Default Redact. */
  action?: GuardrailAction;
  actions?: { category: string; action: GuardrailAction }[];
  stream?: { lookBehindChars?: number };
}

export interface DetectorStatus {
  /** builtIn, pattern/<name>, judge or service/<name>. */
  name: string;
  ready: boolean;
  message?: string;
}

export interface GuardrailStatus extends CommonStatus {
  detectors?: DetectorStatus[];
}

export type Guardrail = Resource<'Guardrail', GuardrailSpec, GuardrailStatus>;
