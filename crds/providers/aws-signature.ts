import { Sha256 } from '@smithy/core/checksum';
import { SignatureV4 } from '@smithy/signature-v4';
import type { AwsCredentials } from './aws-credentials.js';
import type { OutgoingRequest } from './credentials.js';

/**
 * A request signed with AWS Signature Version 4 by @smithy/signature-v4, the AWS SDK's own signer:
 * the same canonical request the SDK's clients built (every header given signed, the host, the
 * payload's SHA-256 in x-amz-content-sha256, the session token of temporary credentials), so an
 * HTTP client of the gateway's choosing (undici, with the gateway's timeouts and no pool of its
 * own) carries Bedrock's calls. The path is signed as it is sent (percent-encoded, then encoded
 * again as SigV4 asks of every service but S3).
 */

/** The headers `request` goes out with, its own and the signature's (host included). */
export async function signedHeaders(
  request: OutgoingRequest,
  credentials: AwsCredentials,
  region: string,
  service: string,
): Promise<Record<string, string>> {
  const url = new URL(request.url);
  const signer = new SignatureV4({ service, region, credentials, sha256: Sha256 });
  const query: Record<string, string> = {};
  for (const [k, v] of url.searchParams) query[k] = v;
  const signed = await signer.sign({
    method: request.method,
    protocol: url.protocol,
    hostname: url.hostname,
    ...(url.port ? { port: Number(url.port) } : {}),
    path: url.pathname,
    query,
    headers: { ...request.headers, host: url.host },
    ...(request.body !== undefined ? { body: request.body } : {}),
  });
  return signed.headers;
}
