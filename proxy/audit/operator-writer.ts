import { createHash } from 'node:crypto';
import { AGENT_NAMESPACE, OPERATOR_SERVICE_ACCOUNT, TOKEN_AUDIENCE } from '../../crds/constants.js';
import type { ClusterIssuerApi } from '../../crds/identity/cluster-issuer.js';

/**
 * Whether a bearer token is the operator's: the only writer of audit records from outside the
 * gateway. The API server says so by TokenReview (audience platform-ai-optimizer), which the chart
 * lets the proxy ask; an answer is kept a minute by the token's digest, so a batch a second costs
 * one review a minute. No static secret is shared between the two.
 */

const KEPT_MS = 60_000;

export function operatorWriter(
  api: Pick<ClusterIssuerApi, 'review'>,
  username = `system:serviceaccount:${AGENT_NAMESPACE}:${OPERATOR_SERVICE_ACCOUNT}`,
  now: () => number = Date.now,
): (token: string) => Promise<boolean> {
  const answers = new Map<string, { ok: boolean; until: number }>();
  return async (token) => {
    const digest = createHash('sha256').update(token).digest('hex');
    const kept = answers.get(digest);
    if (kept && kept.until > now()) return kept.ok;
    const status = await api.review(token, [TOKEN_AUDIENCE]).catch(() => undefined);
    const ok = status?.authenticated === true && status.user?.username === username;
    if (answers.size >= 100) answers.clear();
    // A review that failed (the API server unreachable) is not kept: the next batch asks again.
    if (status) answers.set(digest, { ok, until: now() + KEPT_MS });
    return ok;
  };
}
