import { setTimeout as sleep } from 'node:timers/promises';
import { Informer, type InformerEvent } from '../../crds/kube/informer.js';
import type { KubeClient } from '../../crds/kube/kube-client.js';
import { errorMessage, type Logger } from '../../crds/observability/log.js';
import { containsDesired } from '../runtime/contains-desired.js';
import {
  AUDIT_WEBHOOK_CONFIGURATION,
  type AuditWebhook,
  applyWebhookConfiguration,
  WEBHOOK_CONFIGURATIONS_PATH,
  type WebhookConfiguration,
} from './audit-webhook.js';

/**
 * The audit webhook kept in its configuration while it serves. The chart owns the configuration
 * (Helm makes it, empty, and deletes it on uninstall); the operator adds its webhook once it
 * serves. An edit that drops or changes the webhook (by hand, or an upgrade that renders the
 * configuration again) would otherwise leave every change without its author until the next
 * restart: the webhook is put back as the edit is seen. A deleted configuration is not made
 * again (an uninstall's or an administrator's call, which a replica still running must not
 * undo); one made again gets the webhook as it appears.
 */

export interface KeeperRetry {
  initialMs: number;
  maxMs: number;
}

/**
 * Whether the configuration holds the webhook as the operator applies it, whatever its CA: every
 * replica applies the CA it read from the shared Secret, so replicas started before and after the
 * Secret was made again name different ones, and must not take turns putting back their own.
 */
export function holdsWebhook(config: WebhookConfiguration, webhook: AuditWebhook): boolean {
  const live = config.webhooks?.find((w) => w.name === webhook.name);
  return live !== undefined && containsDesired(live, withoutCa(webhook));
}

function withoutCa(webhook: AuditWebhook): AuditWebhook {
  return { ...webhook, clientConfig: { ...webhook.clientConfig, caBundle: undefined } };
}

/** The longest a put-back waits while another writer keeps dropping the webhook. */
const FIGHT_MAX_MS = 5 * 60_000;

export class WebhookKeeper {
  private readonly informer: Informer<WebhookConfiguration>;
  private readonly stopping = new AbortController();
  /** A put-back under way; `again` asks for one more check after it (an edit seen meanwhile). */
  private putting: Promise<void> | undefined;
  private again = false;
  /**
   * Another writer that keeps dropping the webhook (a GitOps tool syncing the chart's empty
   * configuration) must not be answered write for write: a put-back soon after the last one waits
   * twice as long as the wait before it, up to FIGHT_MAX_MS; one after a quiet spell at once.
   */
  private lastPutBackAt = Number.NEGATIVE_INFINITY;
  private fightWaitMs = 0;

  constructor(
    private readonly client: KubeClient,
    private readonly webhook: AuditWebhook,
    private readonly log: Logger,
    private readonly retry: KeeperRetry,
  ) {
    this.informer = new Informer<WebhookConfiguration>(client, {
      path: WEBHOOK_CONFIGURATIONS_PATH,
      // The one configuration, which the chart's RBAC grants by name (list and watch included).
      fieldSelector: `metadata.name=${AUDIT_WEBHOOK_CONFIGURATION}`,
      backoff: retry,
      onError: (err) => log.warn('audit webhook configuration watch failed, retrying', { error: errorMessage(err) }),
    }).on((event, config) => this.seen(event, config));
  }

  /** Starts watching; an edit made before the first list is found by it. */
  start(): void {
    void this.informer.start();
  }

  async stop(): Promise<void> {
    this.stopping.abort();
    await this.informer.stop();
    await this.putting;
  }

  private seen(event: InformerEvent, config: WebhookConfiguration): void {
    if (event === 'delete') {
      this.log.warn(
        'audit webhook configuration deleted: changes are recorded without their author until it is made again (helm upgrade)',
        { configuration: AUDIT_WEBHOOK_CONFIGURATION },
      );
      return;
    }
    if (!holdsWebhook(config, this.webhook)) this.check();
  }

  private check(): void {
    if (this.putting) {
      this.again = true;
      return;
    }
    this.putting = this.putBack().finally(() => {
      this.putting = undefined;
      if (this.again && !this.stopping.signal.aborted) {
        this.again = false;
        this.check();
      }
    });
  }

  /** Applies the webhook until the configuration holds it, is gone, or the keeper stops. */
  private async putBack(): Promise<void> {
    await this.waitOutAFight();
    let delayMs = this.retry.initialMs;
    while (!this.stopping.signal.aborted) {
      const live = this.informer.get(AUDIT_WEBHOOK_CONFIGURATION);
      if (!live || holdsWebhook(live, this.webhook)) return;
      try {
        const applied = await applyWebhookConfiguration(this.client, this.webhook);
        this.lastPutBackAt = Date.now();
        this.log.warn('audit webhook put back in its configuration (an edit had dropped or changed it)', {
          configuration: AUDIT_WEBHOOK_CONFIGURATION,
          ...(this.fightWaitMs > 0 ? { putBackAgainWithinMs: this.fightWaitMs } : {}),
        });
        // The watch brings the write a moment later; until then the cache reads as before it.
        if (holdsWebhook(applied, this.webhook)) return;
      } catch (err) {
        if (this.stopping.signal.aborted) return;
        this.log.error('audit webhook not put back in its configuration: changes are recorded without their author', {
          error: errorMessage(err),
          retryInMs: delayMs,
        });
      }
      await sleep(delayMs, undefined, { signal: this.stopping.signal }).catch(() => undefined);
      delayMs = Math.min(delayMs * 2, this.retry.maxMs);
    }
  }

  /** Waits before a put-back that follows the last one closely (see `fightWaitMs`). */
  private async waitOutAFight(): Promise<void> {
    const sinceLast = Date.now() - this.lastPutBackAt;
    if (sinceLast > FIGHT_MAX_MS * 2) {
      this.fightWaitMs = 0;
      return;
    }
    this.fightWaitMs = Math.min(Math.max(this.fightWaitMs * 2, this.retry.initialMs), FIGHT_MAX_MS);
    const waitMs = this.fightWaitMs - sinceLast;
    if (waitMs > 0) await sleep(waitMs, undefined, { signal: this.stopping.signal }).catch(() => undefined);
  }
}
