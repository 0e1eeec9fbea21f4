import { readFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { AGENT_NAMESPACE } from '../../crds/constants.js';
import type { KubeClient } from '../../crds/kube/kube-client.js';
import { errorMessage, type Logger } from '../../crds/observability/log.js';
import type { RbacRule } from '../runtime/rbac-rule.js';
import { Admissions } from './admissions.js';
import { AuditSink } from './audit-sink.js';
import { AuditWatcher } from './audit-watcher.js';
import {
  AUDIT_WEBHOOK_CONFIGURATION,
  type AuditWebhook,
  type AuditWebhookServer,
  applyWebhookConfiguration,
  auditWebhook,
  serveAuditWebhook,
  type WebhookEndpoint,
} from './audit-webhook.js';
import { type KeeperRetry, WebhookKeeper } from './webhook-keeper.js';
import { ensureWebhookTls, WEBHOOK_TLS_SECRET, type WebhookTls } from './webhook-tls.js';

/**
 * The operator's part of the audit trail, assembled: the webhook (its TLS from the shared Secret,
 * its configuration applied and kept: webhook-keeper.ts), the watcher of every kind, and the sink
 * to the proxies. It runs on every replica, leader or not. While the webhook cannot serve (RBAC, a
 * port taken, the API server away) changes are recorded with their author unknown, and it is
 * tried again; it is logged, never fatal to the operator.
 */

/** What the audit trail needs beyond the controllers' watches (it lists and watches the same kinds). */
export const AUDIT_RBAC: readonly RbacRule[] = [
  {
    scope: 'cluster',
    apiGroups: ['admissionregistration.k8s.io'],
    resources: ['validatingwebhookconfigurations'],
    // list and watch by name: the keeper watches the one configuration (webhook-keeper.ts).
    verbs: ['get', 'list', 'watch', 'patch'],
    resourceNames: [AUDIT_WEBHOOK_CONFIGURATION],
    reason: "the audit webhook added to the chart's (empty) configuration, with its CA, and kept there",
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
  /**
   * The webhook's first wait before trying again, doubled up to maxMs (default 1 s to 30 s); the
   * same for putting it back in its configuration and for that configuration's watch.
   */
  webhookRetry?: KeeperRetry;
}

export interface RunningAuditTrail {
  /**
   * The webhook's port once it serves (tried again until then); undefined without a webhook, or
   * where the trail stopped first.
   */
  webhook: Promise<number | undefined>;
  stop(): Promise<void>;
}

/** A projected ServiceAccount token file, read anew each time (the kubelet rotates it). */
export const tokenFile = (path: string) => async (): Promise<string> => (await readFile(path, 'utf8')).trim();

type WebhookOptions = Exclude<AuditTrailOptions['webhook'], false>;

/** A webhook serving, and the entry its configuration holds for it. */
interface Serving {
  server: AuditWebhookServer;
  webhook: AuditWebhook;
}

/**
 * The webhook made to serve, tried again with backoff until it does or the trail stops: an API
 * server away for a moment as the operator starts, a Secret or configuration it may not read yet
 * (RBAC granted by a later upgrade), or a port still held must not leave every change without its
 * author until the next restart. What a try got (the TLS, the listener) is kept for the next, so
 * the configuration applied names the CA the listener serves under.
 */
async function serveWebhookUntilStopped(
  client: KubeClient,
  opts: WebhookOptions,
  admissions: Admissions,
  log: Logger,
  stopped: AbortSignal,
  retry: KeeperRetry,
): Promise<Serving | undefined> {
  let tls: WebhookTls | undefined;
  let server: AuditWebhookServer | undefined;
  let delayMs = retry.initialMs;
  while (!stopped.aborted) {
    try {
      tls ??= await ensureWebhookTls(client, opts.names);
      server ??= await serveAuditWebhook(tls, admissions, { port: opts.port, host: opts.host ?? '0.0.0.0' }, log);
      const webhook = auditWebhook(opts.endpoint, tls.ca);
      await applyWebhookConfiguration(client, webhook);
      if (stopped.aborted) break;
      log.info('audit webhook serving', { port: server.port });
      return { server, webhook };
    } catch (err) {
      if (stopped.aborted) break;
      log.error('audit webhook not serving: changes are recorded without their author until it does', {
        error: errorMessage(err),
        retryInMs: delayMs,
      });
      await sleep(delayMs, undefined, { signal: stopped }).catch(() => undefined);
      delayMs = Math.min(delayMs * 2, retry.maxMs);
    }
  }
  await server?.close();
  return undefined;
}

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
  const stopping = new AbortController();
  const retry = { initialMs: 1_000, maxMs: 30_000, ...opts.webhookRetry };
  // Not awaited: the watcher records changes (their author unknown) while the webhook is tried.
  const webhook = opts.webhook
    ? serveWebhookUntilStopped(client, opts.webhook, admissions, log, stopping.signal, retry)
    : Promise.resolve(undefined);
  // Not awaited: a kind the API server will not list yet (RBAC, an outage) is retried by its
  // informer, and must not hold up the webhook or the stop.
  void watcher.start().catch((err: unknown) => log.error('audit watch not started', { error: errorMessage(err) }));
  sink.start();
  // A stop does not wait for a try in flight (an API server away answers after its timeout): the
  // try closes what it opened once it sees the stop, and a webhook already serving is closed here.
  let serving: { server: AuditWebhookServer; keeper: WebhookKeeper } | undefined;
  const port = webhook.then((w) => {
    if (!w) return undefined;
    if (stopping.signal.aborted) {
      void w.server.close();
      return undefined;
    }
    // Serving: its configuration kept holding it (an edit is undone).
    const keeper = new WebhookKeeper(client, w.webhook, log, retry);
    keeper.start();
    serving = { server: w.server, keeper };
    return w.server.port;
  });
  return {
    webhook: port,
    stop: async () => {
      stopping.abort();
      await serving?.keeper.stop();
      await serving?.server.close();
      await watcher.stop();
      await sink.stop();
    },
  };
}
