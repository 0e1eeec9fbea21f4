/**
 * The IAM documents a Bedrock provider needs, rendered for an account: the permission policy
 * of the identity the gateway uses (role or IAM user) and the trust policy of the role.
 * Invoke and streaming invoke are separate actions and both are needed, on foundation models,
 * system-defined and application inference profiles; the two List actions support no
 * resource-level scoping, hence "*"; ApplyGuardrail only matters for providers with a guardrail.
 */

export interface PolicyDocument {
  Version: '2012-10-17';
  Statement: Array<{
    Sid: string;
    Effect: 'Allow';
    Action: string | string[];
    Resource?: string | string[];
    Principal?: { AWS: string };
  }>;
}

export function partitionOf(region: string): string {
  if (region.startsWith('us-gov-')) return 'aws-us-gov';
  if (region.startsWith('cn-')) return 'aws-cn';
  return 'aws';
}

export function bedrockPermissionPolicy(accountId: string, partition = 'aws'): PolicyDocument {
  return {
    Version: '2012-10-17',
    Statement: [
      {
        Sid: 'BedrockInvoke',
        Effect: 'Allow',
        Action: ['bedrock:InvokeModel', 'bedrock:InvokeModelWithResponseStream'],
        Resource: [
          `arn:${partition}:bedrock:*::foundation-model/*`,
          `arn:${partition}:bedrock:*:${accountId}:inference-profile/*`,
          `arn:${partition}:bedrock:*:${accountId}:application-inference-profile/*`,
        ],
      },
      {
        Sid: 'BedrockDiscovery',
        Effect: 'Allow',
        Action: ['bedrock:ListFoundationModels', 'bedrock:ListInferenceProfiles'],
        Resource: '*',
      },
      {
        Sid: 'BedrockGuardrails',
        Effect: 'Allow',
        Action: 'bedrock:ApplyGuardrail',
        Resource: `arn:${partition}:bedrock:*:${accountId}:guardrail/*`,
      },
    ],
  };
}

/** Trust policy of the customer's role: the gateway's principal may assume it. */
export function roleTrustPolicy(gatewayPrincipalArn: string): PolicyDocument {
  return {
    Version: '2012-10-17',
    Statement: [
      { Sid: 'AllowKimchi', Effect: 'Allow', Principal: { AWS: gatewayPrincipalArn }, Action: 'sts:AssumeRole' },
    ],
  };
}
