import type { CommonStatus, Resource } from './meta.js';

type AuthMethod = 'IAMRole' | 'AccessKey' | 'APIKey' | 'WorkloadIdentity' | 'None';

/** The hosting services an ExternalProvider registers (crds/providers/ has one module per non-Bedrock one). */
export type ProviderType = 'bedrock' | 'openai' | 'anthropic' | 'azure-openai' | 'vertex-ai' | 'openai-compatible';

export interface ProviderAuth {
  method: AuthMethod;
  /** Required with IAMRole, forbidden otherwise. */
  roleArn?: string;
  externalId?: string;
  /** Required with AccessKey and APIKey, forbidden otherwise. */
  secretRef?: { name: string };
  /** azure-openai WorkloadIdentity: the Entra ID tenant and the federated app's client id. */
  tenantId?: string;
  clientId?: string;
  /** vertex-ai WorkloadIdentity outside GKE: the workload identity pool provider to exchange at. */
  audience?: string;
  /** vertex-ai WorkloadIdentity with audience: the Google service account to impersonate. */
  serviceAccount?: string;
}

interface AzureSettings {
  resourceName: string;
  /** Absent: Azure's v1 API; set: the dated deployments API. */
  apiVersion?: string;
  deployments: Array<{ name: string; model: string }>;
}

interface VertexSettings {
  project: string;
  location: string;
}

export interface ExternalProviderSpec {
  provider: ProviderType;
  displayName: string;
  /** Bedrock only. */
  region?: string;
  /** openai, anthropic (optional) and openai-compatible (required). */
  baseUrl?: string;
  azure?: AzureSettings;
  vertex?: VertexSettings;
  auth: ProviderAuth;
  /** USD; consumed first and reported as savings. */
  freeCredits?: number;
  /** Defaults to false. */
  includeInCLI: boolean;
  /** Call Bedrock with ConverseStream (default true). */
  streaming: boolean;
  /** Selected Bedrock model ids. */
  models: string[];
  /** Other names callers may send for one of `models`; unique across the cluster (crds/model-names.ts). */
  aliases?: ProviderAlias[];
  /** Models tried in order when the provider is not Ready or fails before answering. */
  fallback?: string[];
  /** A Bedrock guardrail applied to every Converse call of this provider. */
  guardrail?: ProviderGuardrail;
}

interface ProviderAlias {
  name: string;
  /** One of spec.models. */
  model: string;
}

export interface ProviderGuardrail {
  /** The guardrail's id (or ARN). */
  identifier: string;
  /** A version number or DRAFT. */
  version: string;
  /** Bedrock's trace of the guardrail's assessment; not passed to callers. Default disabled. */
  trace?: 'enabled' | 'disabled' | 'enabled_full';
  /** ConverseStream only: check the stream as it is generated (async) or before it is sent (sync, default). */
  streamProcessingMode?: 'sync' | 'async';
}

/** What discovery found for one selected model. */
export interface DiscoveredModel {
  id: string;
  /** Text: Converse (chat); Embedding: InvokeModel (embeddings). */
  type: 'Text' | 'Embedding';
  /** The foundation model an inference profile routes to (priced as it); absent for foundation ids. */
  baseModel?: string;
  profile?: 'SystemDefined' | 'Application';
  /** Bedrock streams its answers (ConverseStream); false: the gateway calls Converse. */
  streaming: boolean;
  /** The model takes images (its input modalities include IMAGE). */
  images?: boolean;
  /** Legacy: AWS is retiring the model. Deprecated: its provider is, by the lifecycle table (crds/catalog/lifecycle.ts). */
  lifecycle: 'Active' | 'Legacy' | 'Deprecated';
  /** The gateway's price table has a price for it. */
  priced: boolean;
  /** Hosted providers: the model speaks OpenAI's API or Anthropic's Messages natively. */
  family?: 'openai' | 'anthropic';
}

export type ExternalProviderPhase = 'Ready' | 'Degraded' | 'Failed';

export interface ExternalProviderStatus extends CommonStatus {
  phase?: ExternalProviderPhase;
  availableModels?: string[];
  /** The selected models that are available, as discovery found them. */
  models?: DiscoveredModel[];
  accessKeyLast4?: string;
  lastDiscoveryTime?: string;
}

export type ExternalProvider = Resource<'ExternalProvider', ExternalProviderSpec, ExternalProviderStatus>;
