import { readFile } from 'node:fs/promises';
import type { ExternalProviderSpec } from '../external-provider.js';
import {
  type AwsCredentials,
  accessKeyFromSecretData,
  type CredentialProvider,
  last4,
  providerCredentials,
  RoleCredentials,
} from './aws-credentials.js';
import { awsFailure, classifyAwsError } from './aws-errors.js';
import { signedHeaders } from './aws-signature.js';
import { AZURE_COGNITIVE_SCOPE } from './azure-openai.js';
import { CredentialError, type ProviderIdentity, type ProviderModule } from './provider.js';
import { GOOGLE_CLOUD_SCOPE } from './vertex-ai.js';

/**
 * The credentials of a provider, put on one request ("authorize this request"), for the proxy's
 * calls and the operator's discovery alike: headers with a key or a token, or a SigV4 signature.
 *
 * - APIKey: the key in the Secret named by spec.auth.secretRef (key apiKey), in the header the
 *   provider reads it from. Only its last 4 characters are ever shown.
 * - WorkloadIdentity on Azure: the proxy's ServiceAccount token (projected, audience
 *   api://AzureADTokenExchange, at AZURE_FEDERATED_TOKEN_FILE as Azure's webhook sets it)
 *   exchanged at Entra ID for an access token of the cognitive-services scope
 *   (client-credentials grant with a client assertion).
 * - WorkloadIdentity on Vertex: without spec.auth.audience, the GKE metadata server's token of
 *   the pod's Google identity; with it, the ServiceAccount token (at GOOGLE_FEDERATED_TOKEN_FILE)
 *   exchanged at Google STS, then, with spec.auth.serviceAccount, an impersonated token from IAM
 *   Credentials.
 * - AccessKey (Bedrock): the two values of the Secret named by spec.auth.secretRef; IAMRole: STS
 *   AssumeRole on spec.auth.roleArn with the process's own AWS identity (aws-credentials.ts,
 *   cached until 5 minutes before the session expires). Either signs the request with SigV4
 *   (aws-signature.ts) for the provider's region.
 *
 * Tokens are cached until 5 minutes before they expire (one exchange in flight per identity) and
 * never logged. Each exchange is a single documented POST or GET, written here rather than
 * through @azure/identity and google-auth-library: those reach only their clouds' fixed HTTPS
 * hosts and bring MSAL and gaxios for one request an hour, where here every host is set by the
 * environment so a test can stand a double in each place.
 */

/** Secret data as the API returns it (base64 values), or undefined when not readable. */
export type SecretSource = (name: string) => { data?: Record<string, string>; forbidden?: boolean } | undefined;

/** The Secret's key holding the API key. */
export const API_KEY_KEY = 'apiKey';

const problem = (reason: string, message: string): CredentialError =>
  new CredentialError({ reason, credentials: true, message });

function apiKeyOf(spec: Pick<ExternalProviderSpec, 'auth'>, secrets: SecretSource): string {
  const name = spec.auth.secretRef?.name ?? '';
  const found = secrets(name);
  if (found?.forbidden) {
    throw problem(
      'SecretForbidden',
      "the gateway may not read the Secret named by spec.auth.secretRef: list it in the chart's providerSecrets",
    );
  }
  const raw = found?.data?.[API_KEY_KEY];
  if (!raw) {
    throw problem(
      found?.data ? 'SecretKeyMissing' : 'SecretNotFound',
      found?.data
        ? 'the Secret named by spec.auth.secretRef has no key apiKey'
        : "the Secret named by spec.auth.secretRef does not exist in the provider's namespace (or is not listed in the chart's providerSecrets)",
    );
  }
  const key = Buffer.from(raw, 'base64').toString('utf8').trim();
  if (!key) throw problem('SecretKeyMissing', 'the Secret named by spec.auth.secretRef has an empty apiKey');
  return key;
}

const keyLast4 = (key: string): string => key.replace(/[^A-Za-z0-9]/g, '').slice(-4);

interface Token {
  value: string;
  /** ms since the epoch. */
  expiresAt: number;
}

const REFRESH_BEFORE_MS = 5 * 60_000;
const EXCHANGE_TIMEOUT_MS = 10_000;

type Fetch = typeof fetch;

export interface TokenOptions {
  env: NodeJS.ProcessEnv;
  fetch?: Fetch;
  now?: () => number;
  /** AWS: the process's own identity roles are assumed with; the SDK's default chain where absent. */
  awsBase?: CredentialProvider;
}

/** One request to authorize: what SigV4 signs. */
export interface OutgoingRequest {
  method: 'GET' | 'POST';
  url: string;
  /** Lower-case names. */
  headers: Record<string, string>;
  body?: string;
}

async function readToken(path: string, what: string): Promise<string> {
  try {
    const t = (await readFile(path, 'utf8')).trim();
    if (t) return t;
  } catch {
    // reported below
  }
  throw problem(
    'FederatedTokenMissing',
    `the proxy's ServiceAccount token for ${what} is not mounted; install the chart with the workload identity values for this cloud`,
  );
}

async function postJson(
  f: Fetch,
  url: string,
  init: { headers?: Record<string, string>; body: string; form?: boolean },
  what: string,
): Promise<Record<string, unknown>> {
  let res: Response;
  try {
    res = await f(url, {
      method: 'POST',
      headers: {
        'content-type': init.form ? 'application/x-www-form-urlencoded' : 'application/json',
        ...init.headers,
      },
      body: init.body,
      signal: AbortSignal.timeout(EXCHANGE_TIMEOUT_MS),
    });
  } catch {
    throw problem('TokenExchangeUnreachable', `${what} could not be reached`);
  }
  const body = (await res.json().catch(() => ({}))) as Record<string, unknown>;
  if (!res.ok) {
    // OAuth's {error, error_description} (Entra prefixes an AADSTS code; no secret in either).
    const code = typeof body.error === 'string' ? body.error : `HTTP ${res.status}`;
    const desc = typeof body.error_description === 'string' ? body.error_description.split(/\r?\n/)[0] : '';
    const aadsts = /AADSTS[0-9]+/.exec(desc ?? '')?.[0];
    throw problem(
      'TokenExchangeRefused',
      `${what} refused the exchange (${code}${aadsts ? `, ${aadsts}` : ''}); check that the federated credential trusts the proxy's ServiceAccount (issuer, subject system:serviceaccount:<namespace>:<name>, audience)`,
    );
  }
  return body;
}

const expiry = (now: number, seconds: unknown) =>
  now + (typeof seconds === 'number' ? seconds : Number(seconds ?? 3600)) * 1000;

/**
 * A provider's credentials per identity: workload-identity tokens and AWS role sessions cached
 * and refreshed before expiry. One instance per process; `authorize` gives the headers one
 * request goes out with.
 */
export class ProviderCredentials {
  private readonly tokens = new Map<string, Token>();
  private readonly pending = new Map<string, Promise<Token>>();
  private readonly fetch: Fetch;
  private readonly now: () => number;
  private readonly roles: RoleCredentials;

  constructor(
    private readonly secrets: SecretSource,
    private readonly opts: TokenOptions,
  ) {
    this.fetch = opts.fetch ?? fetch;
    this.now = opts.now ?? Date.now;
    const sts = opts.env.PAO_ENDPOINT_URL_AWS_STS || opts.env.AWS_ENDPOINT_URL_STS;
    this.roles = new RoleCredentials({
      ...(opts.awsBase ? { base: opts.awsBase } : {}),
      ...(sts ? { endpoint: sts } : {}),
      ...(opts.now ? { now: opts.now } : {}),
    });
  }

  /**
   * The headers `request` goes out with: its own and the credentials' (a key or token header, or
   * the SigV4 signature of the whole request). Throws a CredentialError for credentials that
   * cannot be had.
   */
  async authorize(
    spec: ProviderIdentity,
    provider: Pick<ProviderModule, 'credentialStyle' | 'label' | 'signingName'>,
    request: OutgoingRequest,
  ): Promise<Record<string, string>> {
    switch (spec.auth.method) {
      case 'None':
        return request.headers;
      case 'APIKey': {
        const key = apiKeyOf(spec, this.secrets);
        if (provider.credentialStyle === 'x-api-key') return { ...request.headers, 'x-api-key': key };
        if (provider.credentialStyle === 'api-key') return { ...request.headers, 'api-key': key };
        return { ...request.headers, authorization: `Bearer ${key}` };
      }
      case 'WorkloadIdentity':
        return { ...request.headers, authorization: `Bearer ${await this.token(spec)}` };
      case 'AccessKey':
      case 'IAMRole':
        return signedHeaders(request, await this.aws(spec), spec.region ?? '', provider.signingName ?? '');
      default:
        throw problem('UnsupportedAuth', `auth.method ${spec.auth.method} is not one of ${provider.label}'s`);
    }
  }

  /** The last 4 characters of the key the provider is called with (an API key, an AWS access key id), where there is one. */
  keyLast4(spec: ProviderIdentity): string | undefined {
    const found = this.secrets(spec.auth.secretRef?.name ?? '');
    if (spec.auth.method === 'AccessKey') {
      const key = accessKeyFromSecretData(found?.data);
      return key ? last4(key.accessKeyId) : undefined;
    }
    if (spec.auth.method !== 'APIKey') return undefined;
    try {
      const shown = keyLast4(apiKeyOf(spec, this.secrets));
      return shown.length === 4 ? shown : undefined;
    } catch {
      return undefined;
    }
  }

  /** AWS credentials of an AccessKey or IAMRole provider; their failure classified by the AWS table. */
  private async aws(spec: ProviderIdentity): Promise<AwsCredentials> {
    const secretName = spec.auth.secretRef?.name ?? '';
    try {
      return await providerCredentials(spec.auth, spec.region ?? '', this.roles, () => this.secrets(secretName))();
    } catch (err) {
      const auth = spec.auth.method === 'AccessKey' ? 'AccessKey' : 'IAMRole';
      const p = classifyAwsError(awsFailure(err), { auth, stage: 'credentials', region: spec.region ?? '' }, [
        secretName,
      ]);
      throw new CredentialError(p);
    }
  }

  private async token(spec: ProviderIdentity): Promise<string> {
    const a = spec.auth;
    const key = [spec.provider, a.tenantId, a.clientId, a.audience, a.serviceAccount].join('|');
    const cached = this.tokens.get(key);
    if (cached && cached.expiresAt - REFRESH_BEFORE_MS > this.now()) return cached.value;
    let flight = this.pending.get(key);
    if (!flight) {
      flight = (spec.provider === 'azure-openai' ? this.entra(spec) : this.google(spec)).finally(() =>
        this.pending.delete(key),
      );
      this.pending.set(key, flight);
    }
    const token = await flight;
    this.tokens.set(key, token);
    return token.value;
  }

  /** Entra ID's client-credentials grant with the federated token as client assertion. */
  private async entra(spec: ProviderIdentity): Promise<Token> {
    const env = this.opts.env;
    const assertion = await readToken(
      env.AZURE_FEDERATED_TOKEN_FILE ?? '/var/run/secrets/azure/tokens/azure-identity-token',
      'Azure',
    );
    const host = (env.AZURE_AUTHORITY_HOST || 'https://login.microsoftonline.com').replace(/\/+$/, '');
    const body = await postJson(
      this.fetch,
      `${host}/${spec.auth.tenantId}/oauth2/v2.0/token`,
      {
        form: true,
        body: new URLSearchParams({
          grant_type: 'client_credentials',
          client_id: spec.auth.clientId ?? '',
          scope: AZURE_COGNITIVE_SCOPE,
          client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
          client_assertion: assertion,
        }).toString(),
      },
      'Entra ID',
    );
    if (typeof body.access_token !== 'string')
      throw problem('TokenExchangeRefused', 'Entra ID answered without a token');
    return { value: body.access_token, expiresAt: expiry(this.now(), body.expires_in) };
  }

  /** The GKE metadata server, or Google STS (and IAM Credentials to impersonate). */
  private async google(spec: ProviderIdentity): Promise<Token> {
    const env = this.opts.env;
    if (!spec.auth.audience) {
      const host = env.GCE_METADATA_HOST || 'metadata.google.internal';
      let res: Response;
      try {
        res = await this.fetch(`http://${host}/computeMetadata/v1/instance/service-accounts/default/token`, {
          headers: { 'Metadata-Flavor': 'Google' },
          signal: AbortSignal.timeout(EXCHANGE_TIMEOUT_MS),
        });
      } catch {
        throw problem(
          'MetadataServerUnavailable',
          "the GKE metadata server could not be reached: outside GKE's workload identity set spec.auth.audience to a workload identity pool provider",
        );
      }
      const body = (await res.json().catch(() => ({}))) as Record<string, unknown>;
      if (!res.ok || typeof body.access_token !== 'string') {
        throw problem(
          'MetadataServerRefused',
          `the GKE metadata server gave no token (HTTP ${res.status}): bind the proxy's ServiceAccount to a Google identity (iam.gke.io/gcp-service-account or a principal grant)`,
        );
      }
      return { value: body.access_token, expiresAt: expiry(this.now(), body.expires_in) };
    }
    const subject = await readToken(
      env.GOOGLE_FEDERATED_TOKEN_FILE ?? '/var/run/secrets/google/tokens/token',
      'Google',
    );
    const sts = (env.PAO_ENDPOINT_URL_GOOGLE_STS || 'https://sts.googleapis.com').replace(/\/+$/, '');
    const exchanged = await postJson(
      this.fetch,
      `${sts}/v1/token`,
      {
        body: JSON.stringify({
          grantType: 'urn:ietf:params:oauth:grant-type:token-exchange',
          audience: spec.auth.audience,
          scope: GOOGLE_CLOUD_SCOPE,
          requestedTokenType: 'urn:ietf:params:oauth:token-type:access_token',
          subjectToken: subject,
          subjectTokenType: 'urn:ietf:params:oauth:token-type:jwt',
        }),
      },
      'Google STS',
    );
    if (typeof exchanged.access_token !== 'string')
      throw problem('TokenExchangeRefused', 'Google STS answered without a token');
    const federated = { value: exchanged.access_token, expiresAt: expiry(this.now(), exchanged.expires_in) };
    if (!spec.auth.serviceAccount) return federated;
    const iam = (env.PAO_ENDPOINT_URL_GOOGLE_IAM_CREDENTIALS || 'https://iamcredentials.googleapis.com').replace(
      /\/+$/,
      '',
    );
    const impersonated = await postJson(
      this.fetch,
      `${iam}/v1/projects/-/serviceAccounts/${encodeURIComponent(spec.auth.serviceAccount)}:generateAccessToken`,
      {
        headers: { authorization: `Bearer ${federated.value}` },
        body: JSON.stringify({ scope: [GOOGLE_CLOUD_SCOPE] }),
      },
      'IAM Credentials',
    );
    if (typeof impersonated.accessToken !== 'string') {
      throw problem('TokenExchangeRefused', 'IAM Credentials answered without a token');
    }
    const at = typeof impersonated.expireTime === 'string' ? Date.parse(impersonated.expireTime) : Number.NaN;
    return { value: impersonated.accessToken, expiresAt: Number.isNaN(at) ? this.now() + 3600_000 : at };
  }
}
