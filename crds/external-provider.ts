import type { CommonStatus, Resource } from './meta.js';

export type AuthMethod = 'IAMRole' | 'AccessKey';

export interface ProviderAuth {
  method: AuthMethod;
  /** Required with IAMRole, forbidden with AccessKey. */
  roleArn?: string;
  externalId?: string;
  /** Required with AccessKey, forbidden with IAMRole. */
  secretRef?: { name: string };
}

export interface ExternalProviderSpec {
  provider: 'bedrock';
  displayName: string;
  region: string;
  auth: ProviderAuth;
  /** USD; consumed first and reported as savings. */
  freeCredits?: number;
  /** Defaults to false. */
  includeInCLI: boolean;
  /** Call Bedrock with ConverseStream (default true). */
  streaming: boolean;
  /** Selected Bedrock model ids. */
  models: string[];
  /** Models tried in order when the provider is not Ready or fails before answering. */
  fallback?: string[];
}

export type ExternalProviderPhase = 'Ready' | 'Degraded' | 'Failed';

export interface ExternalProviderStatus extends CommonStatus {
  phase?: ExternalProviderPhase;
  availableModels?: string[];
  accessKeyLast4?: string;
  lastDiscoveryTime?: string;
}

/** Condition types of an ExternalProvider. */
export const EXTERNAL_PROVIDER_CONDITIONS = ['CredentialsValid', 'ModelsAvailable', 'Ready'] as const;

export type ExternalProvider = Resource<'ExternalProvider', ExternalProviderSpec, ExternalProviderStatus>;
