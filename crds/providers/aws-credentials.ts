import { AssumeRoleCommand, STSClient } from '@aws-sdk/client-sts';
import { ACCESS_KEY_ID_KEY, SECRET_ACCESS_KEY_KEY } from '../constants.js';
import type { ProviderAuth } from '../external-provider.js';
import { SECRET_FORBIDDEN, SECRET_NOT_FOUND } from './aws-errors.js';

/**
 * AWS credentials of an ExternalProvider, shared by the operator (discovery) and the proxy
 * (invocation), which sign requests with them (aws-signature.ts). AccessKey: the two values of
 * the referenced Secret. IAMRole: STS AssumeRole
 * on the role with the process's own AWS identity as the base (environment, web identity or
 * instance role, through the SDK's default chain), cached in memory until 5 minutes before
 * the temporary credentials expire; nothing is stored.
 */

export interface AwsCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
  expiration?: Date;
}

export type CredentialProvider = () => Promise<AwsCredentials>;

/** Session name in the customer's CloudTrail: says who assumed the role. */
const ROLE_SESSION_NAME = 'platform-ai-optimizer-gateway';
/** Temporary credentials are renewed this long before they expire. */
export const REFRESH_BEFORE_EXPIRY_MS = 5 * 60_000;

/** Secret data as the API returns it (base64 values). */
export function accessKeyFromSecretData(data: Record<string, string> | undefined): AwsCredentials | undefined {
  const id = data?.[ACCESS_KEY_ID_KEY];
  const secret = data?.[SECRET_ACCESS_KEY_KEY];
  if (!id || !secret) return undefined;
  return {
    accessKeyId: Buffer.from(id, 'base64').toString('utf8').trim(),
    secretAccessKey: Buffer.from(secret, 'base64').toString('utf8').trim(),
  };
}

export const last4 = (accessKeyId: string): string => accessKeyId.slice(-4);

/** Credentials could not be had: `code` is AWS's error name (STS) or one of our Secret codes. */
export class CredentialsError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'CredentialsError';
  }
}

interface Cached {
  credentials: AwsCredentials;
  refreshAt: number;
}

/**
 * Assumes roles and keeps the temporary credentials per (role, external id, region) until
 * shortly before they expire. Concurrent callers of an expired entry share one STS call.
 */
export class RoleCredentials {
  private readonly cache = new Map<string, Cached>();
  private readonly inflight = new Map<string, Promise<AwsCredentials>>();

  constructor(
    private readonly opts: {
      /** The process's own identity; default: the SDK's default provider chain. */
      base?: CredentialProvider;
      endpoint?: string;
      now?: () => number;
    } = {},
  ) {}

  private now(): number {
    return this.opts.now?.() ?? Date.now();
  }

  /** STS calls made so far (tests check the cache with it). */
  stsCalls = 0;

  get(roleArn: string, region: string, externalId?: string): Promise<AwsCredentials> {
    const key = `${roleArn}|${externalId ?? ''}|${region}`;
    const hit = this.cache.get(key);
    if (hit && hit.refreshAt > this.now()) return Promise.resolve(hit.credentials);
    let pending = this.inflight.get(key);
    if (!pending) {
      pending = this.assume(roleArn, region, externalId)
        .then((credentials) => {
          const expires = credentials.expiration?.getTime() ?? this.now() + 15 * 60_000;
          this.cache.set(key, { credentials, refreshAt: expires - REFRESH_BEFORE_EXPIRY_MS });
          return credentials;
        })
        .finally(() => this.inflight.delete(key));
      this.inflight.set(key, pending);
    }
    return pending;
  }

  private async assume(roleArn: string, region: string, externalId?: string): Promise<AwsCredentials> {
    const sts = new STSClient({
      region,
      maxAttempts: 2,
      ...(this.opts.endpoint ? { endpoint: this.opts.endpoint } : {}),
      ...(this.opts.base ? { credentials: this.opts.base } : {}),
    });
    this.stsCalls++;
    try {
      const out = await sts.send(
        new AssumeRoleCommand({
          RoleArn: roleArn,
          RoleSessionName: ROLE_SESSION_NAME,
          ...(externalId ? { ExternalId: externalId } : {}),
        }),
      );
      const c = out.Credentials;
      if (!c?.AccessKeyId || !c.SecretAccessKey)
        throw new CredentialsError('NoCredentials', 'STS returned no credentials');
      return {
        accessKeyId: c.AccessKeyId,
        secretAccessKey: c.SecretAccessKey,
        ...(c.SessionToken ? { sessionToken: c.SessionToken } : {}),
        ...(c.Expiration ? { expiration: c.Expiration } : {}),
      };
    } catch (err) {
      if (err instanceof CredentialsError) throw err;
      const e = err as { name?: string; message?: string };
      throw new CredentialsError(e.name ?? 'AssumeRoleFailed', e.message ?? String(err));
    } finally {
      sts.destroy();
    }
  }
}

/** What a component could read of a provider's Secret. */
export interface SecretLookup {
  data?: Record<string, string>;
  /** RBAC does not let this component read it (see crds/kube/named-secrets.ts). */
  forbidden?: boolean;
}

/** The credential provider of one ExternalProvider's auth; `secret` looks up its Secret (AccessKey). */
export function providerCredentials(
  auth: ProviderAuth,
  region: string,
  roles: RoleCredentials,
  secret: () => SecretLookup | undefined,
): CredentialProvider {
  if (auth.method === 'IAMRole' && auth.roleArn) {
    const roleArn = auth.roleArn;
    return () => roles.get(roleArn, region, auth.externalId);
  }
  return async () => {
    const found = secret();
    if (found?.forbidden) throw new CredentialsError(SECRET_FORBIDDEN, 'the Secret may not be read');
    const creds = accessKeyFromSecretData(found?.data);
    if (!creds) {
      throw new CredentialsError(
        SECRET_NOT_FOUND,
        `the Secret is missing or lacks ${ACCESS_KEY_ID_KEY} and ${SECRET_ACCESS_KEY_KEY}`,
      );
    }
    return creds;
  };
}
