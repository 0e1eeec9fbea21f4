import { generateKeyPairSync, randomBytes } from 'node:crypto';
import forge from 'node-forge';
import { AGENT_NAMESPACE, MANAGED_BY_LABEL, MANAGED_BY_VALUE } from '../../crds/constants.js';
import { isConflict, type KubeClient } from '../../crds/kube/kube-client.js';

/**
 * The audit webhook's TLS: a CA and a serving certificate made once by whichever operator replica
 * starts first and kept in a Secret, so that every replica serves the same certificate and the
 * API server trusts it through the webhook configuration's caBundle. Made here rather than by a
 * cert-manager the cluster may not have, or by Helm (which would make a new one on each upgrade).
 */

export const WEBHOOK_TLS_SECRET = 'platform-ai-optimizer-audit-webhook-tls';

export interface WebhookTls {
  /** PEM. */
  key: string;
  cert: string;
  ca: string;
}

const TEN_YEARS_MS = 10 * 365 * 86_400_000;

/** A new RSA key, made by Node's crypto (node-forge's own key generation is slow JavaScript). */
function rsaKeys(): { key: string; forgeKey: forge.pki.rsa.PrivateKey; forgePublic: forge.pki.rsa.PublicKey } {
  const pair = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const key = pair.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const pub = pair.publicKey.export({ type: 'spki', format: 'pem' }).toString();
  return {
    key,
    forgeKey: forge.pki.privateKeyFromPem(key) as forge.pki.rsa.PrivateKey,
    forgePublic: forge.pki.publicKeyFromPem(pub) as forge.pki.rsa.PublicKey,
  };
}

function certificate(
  subject: string,
  publicKey: forge.pki.rsa.PublicKey,
  issuer: forge.pki.CertificateField[],
  extensions: object[],
): forge.pki.Certificate {
  const cert = forge.pki.createCertificate();
  cert.publicKey = publicKey;
  // A positive serial: the high bit cleared.
  cert.serialNumber = `0${randomBytes(16).toString('hex')}`;
  cert.validity.notBefore = new Date(Date.now() - 60_000);
  cert.validity.notAfter = new Date(Date.now() + TEN_YEARS_MS);
  cert.setSubject([{ name: 'commonName', value: subject }]);
  cert.setIssuer(issuer);
  cert.setExtensions(extensions);
  return cert;
}

/** A CA and a certificate signed by it for the names (DNS names, or IP addresses) given. */
export function makeWebhookTls(names: string[]): WebhookTls {
  const ca = rsaKeys();
  const caCert = certificate(
    'platform-ai-optimizer audit webhook CA',
    ca.forgePublic,
    [{ name: 'commonName', value: 'platform-ai-optimizer audit webhook CA' }],
    [
      { name: 'basicConstraints', cA: true, critical: true },
      { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
    ],
  );
  caCert.sign(ca.forgeKey, forge.md.sha256.create());
  const leaf = rsaKeys();
  const altNames = names.map((n) => (/^[\d.]+$|:/.test(n) ? { type: 7, ip: n } : { type: 2, value: n }));
  const cert = certificate(names[0] ?? 'webhook', leaf.forgePublic, caCert.subject.attributes, [
    { name: 'basicConstraints', cA: false },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
    { name: 'extKeyUsage', serverAuth: true },
    { name: 'subjectAltName', altNames },
  ]);
  cert.sign(ca.forgeKey, forge.md.sha256.create());
  return { key: leaf.key, cert: forge.pki.certificateToPem(cert), ca: forge.pki.certificateToPem(caCert) };
}

const b64 = (s: string) => Buffer.from(s).toString('base64');
const text = (s: string | undefined) => Buffer.from(s ?? '', 'base64').toString();

/**
 * The webhook's TLS from its Secret, made and stored first if there is none. Two replicas starting
 * at once both make one; the one whose create lost reads the winner's.
 */
export async function ensureWebhookTls(client: KubeClient, names: string[]): Promise<WebhookTls> {
  const path = `/api/v1/namespaces/${AGENT_NAMESPACE}/secrets`;
  const read = async () => {
    const s = await client.get<{ data?: Record<string, string> }>(`${path}/${WEBHOOK_TLS_SECRET}`);
    const d = s?.data;
    return d?.['tls.key'] && d['tls.crt'] && d['ca.crt']
      ? { key: text(d['tls.key']), cert: text(d['tls.crt']), ca: text(d['ca.crt']) }
      : undefined;
  };
  const found = await read();
  if (found) return found;
  const made = makeWebhookTls(names);
  try {
    await client.create(path, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: {
        name: WEBHOOK_TLS_SECRET,
        namespace: AGENT_NAMESPACE,
        labels: { [MANAGED_BY_LABEL]: MANAGED_BY_VALUE },
      },
      type: 'kubernetes.io/tls',
      data: { 'tls.key': b64(made.key), 'tls.crt': b64(made.cert), 'ca.crt': b64(made.ca) },
    });
    return made;
  } catch (err) {
    if (!isConflict(err)) throw err;
    const theirs = await read();
    if (!theirs) throw err;
    return theirs;
  }
}
