import { describe, expect, it } from 'vitest';
import { bedrockPermissionPolicy, partitionOf, roleTrustPolicy } from './iam-policy.js';

describe('IAM documents', () => {
  it('render the permission policy with both invoke actions and discovery on *', () => {
    expect(bedrockPermissionPolicy('123456789012', partitionOf('us-gov-west-1'))).toEqual({
      Version: '2012-10-17',
      Statement: [
        {
          Sid: 'BedrockInvoke',
          Effect: 'Allow',
          Action: ['bedrock:InvokeModel', 'bedrock:InvokeModelWithResponseStream'],
          Resource: [
            'arn:aws-us-gov:bedrock:*::foundation-model/*',
            'arn:aws-us-gov:bedrock:*:123456789012:inference-profile/*',
            'arn:aws-us-gov:bedrock:*:123456789012:application-inference-profile/*',
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
          Resource: 'arn:aws-us-gov:bedrock:*:123456789012:guardrail/*',
        },
      ],
    });
    expect(partitionOf('cn-north-1')).toBe('aws-cn');
    expect(partitionOf('eu-west-1')).toBe('aws');
  });

  it('render the trust policy naming the gateway principal', () => {
    expect(roleTrustPolicy('arn:aws:iam::999999999999:role/gateway').Statement).toEqual([
      {
        Sid: 'AllowKimchi',
        Effect: 'Allow',
        Principal: { AWS: 'arn:aws:iam::999999999999:role/gateway' },
        Action: 'sts:AssumeRole',
      },
    ]);
  });
});
