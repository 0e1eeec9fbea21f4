import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AwsDouble, startAwsDouble } from '../../e2e/doubles/aws.js';
import {
  accessKeyFromSecretData,
  CredentialsError,
  last4,
  REFRESH_BEFORE_EXPIRY_MS,
  RoleCredentials,
} from './aws-credentials.js';

const GATEWAY = { accessKeyId: 'AKIAGATEWAY000000009', secretAccessKey: 'gatewaySecret999999999999999999999999999' };
const ROLE = 'arn:aws:iam::123456789012:role/bedrock';
let aws: AwsDouble;

beforeAll(async () => {
  aws = await startAwsDouble({
    principals: [
      { ...GATEWAY, arn: 'arn:aws:iam::999999999999:user/gw', allow: ['sts:AssumeRole'], account: '999999999999' },
    ],
    roles: [
      { arn: ROLE, trusted: ['arn:aws:iam::999999999999:user/gw'], allow: ['bedrock:*'] },
      {
        arn: 'arn:aws:iam::123456789012:role/other',
        trusted: ['arn:aws:iam::111111111111:root'],
        allow: ['bedrock:*'],
      },
    ],
    models: {},
  });
});
afterAll(() => aws.close());

describe('RoleCredentials', () => {
  it('assumes the role once and serves the cache until 5 minutes before expiry', async () => {
    let clock = Date.now();
    const roles = new RoleCredentials({ base: async () => GATEWAY, endpoint: aws.url, now: () => clock });
    const [a, b] = await Promise.all([roles.get(ROLE, 'us-east-1'), roles.get(ROLE, 'us-east-1')]);
    expect(roles.stsCalls).toBe(1);
    expect(a).toBe(b);
    expect(a.accessKeyId).toMatch(/^ASIA/);
    expect(a.sessionToken).toBeTruthy();
    const expires = a.expiration?.getTime() ?? 0;
    clock = expires - REFRESH_BEFORE_EXPIRY_MS - 1000;
    await roles.get(ROLE, 'us-east-1');
    expect(roles.stsCalls).toBe(1);
    clock = expires - REFRESH_BEFORE_EXPIRY_MS + 1000;
    const renewed = await roles.get(ROLE, 'us-east-1');
    expect(roles.stsCalls).toBe(2);
    expect(renewed.accessKeyId).not.toBe(a.accessKeyId);
  });

  it('reports a denied AssumeRole with the STS error code and no credentials in the message', async () => {
    const roles = new RoleCredentials({ base: async () => GATEWAY, endpoint: aws.url });
    const err = await roles.get('arn:aws:iam::123456789012:role/other', 'us-east-1').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CredentialsError);
    expect((err as CredentialsError).code).toBe('AccessDenied');
    expect((err as CredentialsError).message).not.toContain(GATEWAY.secretAccessKey);
  });
});

describe('access keys', () => {
  it('reads both values of a Secret and shows only the last 4 of the id', () => {
    const data = {
      accessKeyId: Buffer.from('AKIAIOSFODNN7EXAMPLE\n').toString('base64'),
      secretAccessKey: Buffer.from('wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY').toString('base64'),
    };
    const creds = accessKeyFromSecretData(data);
    expect(creds).toEqual({
      accessKeyId: 'AKIAIOSFODNN7EXAMPLE',
      secretAccessKey: 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
    });
    expect(last4(creds?.accessKeyId ?? '')).toBe('MPLE');
    expect(accessKeyFromSecretData({ accessKeyId: data.accessKeyId })).toBeUndefined();
  });
});
