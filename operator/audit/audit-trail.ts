import { readFile } from 'node:fs/promises';
import { AGENT_NAMESPACE } from '../../crds/constants.js';
import type { KubeClient } from '../../crds/kube/kube-client.js';
import { errorMessage, type Logger } from '../../crds/observability/log.js';
import type { RbacRule } from '../runtime/rbac-rule.js';
import { Admissions } from './admissions.js';
import { AuditSink } from './audit-sink.js';
import { AuditWatcher } from './audit-watcher.js';
import {
  AUDIT_WEBHOOK_CONFIGURATION,
  applyWebhookConfiguration,
  serveAuditWebhook,
  type WebhookEndpoint,
} from './audit-webhook.js';
import { ensureWebhookTls, WEBHOOK_TLS_SECRET } from './webhook-tls.js';

/**
 * The operator's part of the audit trail, assembled: the webhook (its TLS from the shared Secret,
 * its configuration applied), the watcher of every kind, and the sink to the proxies. It runs on
 * every replica, leader or not. A webhook that cannot start (RBAC, a port taken) leaves the
 * changes recorded with their author unknown; it is logged, never fatal to the operator.
 */

/** What the audit trail needs beyond the controllers' watches (it lists and watches the same kinds). */
export const AUDIT_RBAC: readonly RbacRule[] = [
  {
    scope: 'cluster',
    apiGroups: ['admissionregistration.k8s.io'],
    resources: ['validatingwebhookconfigurations'],
    verbs: ['get', 'patch'],
    resourceNames: [AUDIT_WEBHOOK_CONFIGURATION],
    reason: "the audit webhook added to the chart's (empty) configuration, with its CA",
  },
  {
    scope: AGENT_NAMESPACE,
    apiGroups: [''],
    resources: ['secrets'],
    verbs: ['get'],
    resourceNames: [WEBHOOK_TLS_SECRET],
    reason:
      "the audit webhook's CA and certificate, made once (create, as the ApiKeys' Secrets) and read by every replica",
  },
];

export interface AuditTrailOptions {
  /** The proxies' base URL, where records are sent (POST /v1/audit). */
  proxyUrl: string;
  /** The operator's ServiceAccount token, audience platform-ai-optimizer. */
  token: () => Promise<string>;
  /** Where the webhook listens and how the API server reaches it; false: no webhook (authors unknown). */
  webhook:
    | {
        endpoint: WebhookEndpoint;
        port: number;
        host?: string;
        /** The names (DNS or IP) its certificate is for, when it makes one. */
        names: string[];
      }
    | false;
  graceMs?: number;
}

export interface RunningAuditTrail {
  webhookPort?: number;
  stop(): Promise<void>;
}

/** A projected ServiceAccount token file, read anew each time (the kubelet rotates it). */
export const tokenFile = (path: string) => async (): Promise<string> => (await readFile(path, 'utf8')).trim();

export async function startAuditTrail(
  client: KubeClient,
  opts: AuditTrailOptions,
  log: Logger,
): Promise<RunningAuditTrail> {
  const admissions = new Admissions();
  const sink = new AuditSink({
    url: opts.proxyUrl,
    token: opts.token,
    log,
    onDropped: (n) => log.error('audit records dropped: the proxies took none for too long', { dropped: n }),
  });
  const watcher = new AuditWatcher(client, admissions, (r) => sink.push(r), {
    log,
    ...(opts.graceMs !== undefined ? { graceMs: opts.graceMs } : {}),
  });
  let webhook: Awaited<ReturnType<typeof serveAuditWebhook>> | undefined;
  if (opts.webhook) {
    try {
      const tls = await ensureWebhookTls(client, opts.webhook.names);
      webhook = await serveAuditWebhook(
        tls,
        admissions,
        { port: opts.webhook.port, host: opts.webhook.host ?? '0.0.0.0' },
        log,
      );
      await applyWebhookConfiguration(client, opts.webhook.endpoint, tls.ca);
    } catch (err) {
      log.error('audit webhook not serving: changes are recorded without their author', { error: errorMessage(err) });
    }
  }
  // Not awaited: a kind the API server will not list yet (RBAC, an outage) is retried by its
  // informer, and must not hold up the webhook or the stop.
  void watcher.start().catch((err: unknown) => log.error('audit watch not started', { error: errorMessage(err) }));
  sink.start();
  return {
    ...(webhook ? { webhookPort: webhook.port } : {}),
    stop: async () => {
      await webhook?.close();
      await watcher.stop();
      await sink.stop();
    },
  };
}
