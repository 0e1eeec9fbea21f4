import { createHash } from 'node:crypto';
import { decodeJwt } from 'jose';
import { AGENT_NAMESPACE, OPERATOR_SERVICE_ACCOUNT, TOKEN_AUDIENCE } from '../../crds/constants.js';
import type { ClusterIssuerApi } from '../../crds/identity/cluster-issuer.js';

/**
 * Whether a bearer token is the operator's: the only writer of audit records from outside the
 * gateway. The API server says so by TokenReview (audience platform-ai-optimizer), which the chart
 * lets the proxy ask; an answer is kept a minute by the token's digest, so a batch a second costs
 * one review a minute. No static secret is shared between the two. A token whose (unverified)
 * subject is not the operator's ServiceAccount is refused without asking: a flood of other tokens
 * costs the API server nothing.
 */

export type WriterCheck = 'operator' | 'other' | 'unavailable';

const KEPT_MS = 60_000;
const MAX_KEPT = 100;

const claimsSub = (token: string): string | undefined => {
  try {
    const sub = decodeJwt(token).sub;
    return typeof sub === 'string' ? sub : undefined;
  } catch {
    return undefined;
  }
};

export function operatorWriter(
  api: Pick<ClusterIssuerApi, 'review'>,
  username = `system:serviceaccount:${AGENT_NAMESPACE}:${OPERATOR_SERVICE_ACCOUNT}`,
  now: () => number = Date.now,
): (token: string) => Promise<WriterCheck> {
  const answers = new Map<string, { ok: boolean; until: number }>();
  return async (token) => {
    if (claimsSub(token) !== username) return 'other';
    const digest = createHash('sha256').update(token).digest('hex');
    const kept = answers.get(digest);
    if (kept && kept.until > now()) return kept.ok ? 'operator' : 'other';
    const status = await api.review(token, [TOKEN_AUDIENCE]).catch(() => undefined);
    // A review that failed (the API server unreachable) is not kept, nor taken for a refusal.
    if (!status) return 'unavailable';
    const ok = status.authenticated === true && status.user?.username === username;
    answers.delete(digest);
    answers.set(digest, { ok, until: now() + KEPT_MS });
    if (answers.size > MAX_KEPT) answers.delete(answers.keys().next().value ?? '');
    return ok ? 'operator' : 'other';
  };
}
