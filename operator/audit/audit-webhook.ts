import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { API_GROUP } from '../../crds/constants.js';
import type { KubeClient, KubeObject } from '../../crds/kube/kube-client.js';
import { errorMessage, type Logger } from '../../crds/observability/log.js';
import { type Admissions, answerReview } from './admissions.js';
import type { WebhookTls } from './webhook-tls.js';

/**
 * The validating admission webhook that learns who changes our objects: the API server sends it
 * every create, update and delete of an ai.platform object (not their status), and it always
 * allows. failurePolicy Ignore and a 2 s timeout: an operator that is down or slow never holds up
 * a change. Dry runs are answered and forgotten (sideEffects None).
 */

export const AUDIT_WEBHOOK_CONFIGURATION = 'platform-ai-optimizer-audit';
const AUDIT_WEBHOOK_PATH = '/audit';
const FIELD_MANAGER = 'platform-ai-optimizer-operator';
/** Two objects of 1.5 MiB (etcd's limit), old and new, and the review around them. */
const MAX_REVIEW_BYTES = 4 * 1024 * 1024;

/** Where the API server reaches the webhook: the chart's Service, or a URL (a test's loopback). */
export type WebhookEndpoint = { service: { namespace: string; name: string; port: number } } | { url: string };

/** The collection of validating webhook configurations (this one is AUDIT_WEBHOOK_CONFIGURATION in it). */
export const WEBHOOK_CONFIGURATIONS_PATH = '/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations';

/** The operator's webhook in the configuration, as applied (the API server adds its defaults). */
export interface AuditWebhook {
  name: string;
  clientConfig: { caBundle?: string; [field: string]: unknown };
  [field: string]: unknown;
}

/** The webhook entry this operator puts in the configuration, for this endpoint and CA. */
export function auditWebhook(endpoint: WebhookEndpoint, caPem: string): AuditWebhook {
  const clientConfig =
    'url' in endpoint
      ? { url: `${endpoint.url}${AUDIT_WEBHOOK_PATH}` }
      : { service: { ...endpoint.service, path: AUDIT_WEBHOOK_PATH } };
  return {
    name: `audit.${API_GROUP}`,
    admissionReviewVersions: ['v1'],
    sideEffects: 'None',
    failurePolicy: 'Ignore',
    timeoutSeconds: 2,
    matchPolicy: 'Equivalent',
    rules: [
      {
        apiGroups: [API_GROUP],
        apiVersions: ['*'],
        resources: ['*'],
        operations: ['CREATE', 'UPDATE', 'DELETE'],
        scope: '*',
      },
    ],
    clientConfig: { ...clientConfig, caBundle: Buffer.from(caPem).toString('base64') },
  };
}

/**
 * Adds the webhook to the configuration (server-side apply: its other webhooks, if any, are kept;
 * every replica applies the same). Answers the configuration as the API server holds it after.
 */
export function applyWebhookConfiguration(client: KubeClient, webhook: AuditWebhook): Promise<WebhookConfiguration> {
  return client.apply<WebhookConfiguration>(
    `${WEBHOOK_CONFIGURATIONS_PATH}/${AUDIT_WEBHOOK_CONFIGURATION}`,
    {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'ValidatingWebhookConfiguration',
      metadata: { name: AUDIT_WEBHOOK_CONFIGURATION },
      webhooks: [webhook],
    },
    FIELD_MANAGER,
  );
}

/** A ValidatingWebhookConfiguration, as far as the operator reads one. */
export interface WebhookConfiguration extends KubeObject {
  webhooks?: Array<{ name?: string }>;
}

export interface AuditWebhookServer {
  port: number;
  close(): Promise<void>;
}

/** Serves the webhook over TLS; every review is answered allowed, and its author remembered. */
export function serveAuditWebhook(
  tls: WebhookTls,
  admissions: Admissions,
  where: { port: number; host: string },
  log: Logger,
): Promise<AuditWebhookServer> {
  const server: Server = createServer({ key: tls.key, cert: tls.cert }, (req, res) => {
    const answer = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    };
    if (req.method !== 'POST' || req.url?.split('?')[0] !== AUDIT_WEBHOOK_PATH)
      return answer(404, { error: 'not found' });
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_REVIEW_BYTES) {
        answer(413, { error: 'review too large' });
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => {
      let review: unknown;
      try {
        review = JSON.parse(Buffer.concat(chunks).toString());
      } catch {
        return answer(400, { error: 'not JSON' });
      }
      const out = answerReview(review);
      if (typeof out === 'string') return answer(400, { error: out });
      if (out.object && out.admission) admissions.remember(out.object, out.admission);
      answer(200, out.answer);
    });
    req.on('error', (err) => log.warn('audit webhook request failed', { error: errorMessage(err) }));
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(where.port, where.host, () => {
      resolve({
        port: (server.address() as AddressInfo).port,
        close: () => new Promise<void>((done) => server.close(() => done())),
      });
    });
  });
}
