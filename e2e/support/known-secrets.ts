import type { AwsCredentials } from '../../crds/providers/aws-credentials.js';

/**
 * The credentials and prompt text the e2e suites hand to the product, in one place so the
 * secret scan (secret-scan.e2e.test.ts) can look for every one of them in everything the run
 * captured. API keys need no entry: any `sk-...` token in captured output is a leak.
 */

/** The gateway's own AWS identity in the Bedrock suite. */
export const BEDROCK_GATEWAY: AwsCredentials = {
  accessKeyId: 'AKIAGATEWAY000000001',
  secretAccessKey: 'gatewaySecretKey0000000000000000000000000',
};

/** The access key a user stores in a Secret for an AccessKey provider (AWS's documented example key). */
export const USER_ACCESS_KEY = { id: 'AKIAIOSFODNN7EXAMPLE', secret: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY' };

/** The gateway's AWS identity in the install journey. */
export const JOURNEY_GATEWAY: AwsCredentials = {
  accessKeyId: 'AKIAJOURNEY000000001',
  secretAccessKey: 'journeySecret00000000000000000000000000',
};

/** Put in every prompt the e2e suites send: it must never appear in a log, event or status. */
export const PROMPT_CANARY = 'canary-prompt-7d41b9';

export const SECRET_VALUES: readonly string[] = [
  BEDROCK_GATEWAY.secretAccessKey,
  USER_ACCESS_KEY.secret,
  JOURNEY_GATEWAY.secretAccessKey,
  PROMPT_CANARY,
];

/**
 * Names the product must never show outside the spec that holds them: the access-key Secrets
 * the suites create or reference, and the AWS account ids of the doubles' principals and roles.
 */
export const PROVIDER_SECRET_NAMES: readonly string[] = [
  'bedrock-keys',
  'journey-keys',
  'unlisted-keys',
  'no-such-keys',
];
export const AWS_ACCOUNT_IDS: readonly string[] = ['123456789012', '999999999999', '111111111111'];
