import { randomBytes } from 'node:crypto';
import {
  AGENT_NAMESPACE,
  MANAGED_BY_LABEL,
  MANAGED_BY_VALUE,
  MCP_SESSIONS_KEY,
  MCP_SESSIONS_SECRET,
} from '../../crds/constants.js';
import { KubeApiError, type KubeClient } from '../../crds/kube/kube-client.js';

/**
 * The key every proxy replica seals MCP session ids with (proxy/mcp/session.ts), so that any
 * replica serves any session and a session outlives the replica that began it. Created once
 * with 32 random bytes; an existing one is kept (create answers 409 without its data: the
 * operator never reads it). Deleting it rotates it: the proxies' open sessions then end (404),
 * and their clients initialize again as the spec says.
 */
export async function ensureSessionsSecret(client: KubeClient): Promise<'created' | 'exists'> {
  try {
    await client.create(`/api/v1/namespaces/${AGENT_NAMESPACE}/secrets`, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: {
        name: MCP_SESSIONS_SECRET,
        namespace: AGENT_NAMESPACE,
        labels: { [MANAGED_BY_LABEL]: MANAGED_BY_VALUE },
      },
      type: 'Opaque',
      data: { [MCP_SESSIONS_KEY]: randomBytes(32).toString('base64') },
    });
    return 'created';
  } catch (err) {
    if (err instanceof KubeApiError && err.status === 409) return 'exists';
    throw err;
  }
}
