import type { Tool } from '@modelcontextprotocol/client';
import { MCP_CLIENT_SECRET_KEY, MCP_TOKEN_KEY } from '../../crds/mcp/auth.js';
import { admittedTools, type McpFailure, type McpFailureReason } from '../../crds/mcp/discovery.js';
import {
  type McpServedTool,
  type McpServer,
  type McpServerStatus,
  mcpBridgeName,
  mcpServerUrl,
} from '../../crds/mcp-server.js';
import { rfc3339 } from '../../crds/meta.js';
import { setCondition } from '../runtime/conditions.js';

/**
 * An McpServer's status as a pure function of one discovery attempt (or what kept it from being
 * tried), the status before it and the time: Ready with the tools the spec admits, or Degraded
 * with the reason from one table, each row saying the cause and the fix in words that name the
 * spec's fields and the Secret's key, never the Secret's name or a credential.
 */

/** Reasons only the operator knows, beside the client's (crds/mcp/discovery.ts). */
export type McpProblemReason = McpFailureReason | 'BridgeNotReady' | 'InvalidSpec';

export interface McpProblem {
  reason: McpProblemReason;
  detail: string;
}

export type McpDiscoveryOutcome =
  | {
      ok: true;
      protocolVersion: string | undefined;
      serverInfo: { name: string; version: string } | undefined;
      /** Every tool the server listed, before the spec's filter. */
      tools: readonly Tool[];
    }
  | { ok: false; problem: McpProblem | McpFailure };

/** Descriptions are cut here (the schema's bound): the status is for people, the schema stays with the server. */
export const DESCRIPTION_MAX = 1024;
/** More tools than this are not listed in status (the schema's bound: an object stays under the API's size limit). */
export const STATUS_TOOLS_MAX = 512;
/** Longer names are not MCP tool names (the specification's bound, and the schema's). */
const NAME_MAX = 128;
/** serverInfo's name and version, as the schema bounds them. */
const INFO_MAX = 256;

interface Words {
  server: McpServer;
  detail: string;
  endpoint: string;
}

const secretWords = (key: string) => `the key ${key} of the Secret named in spec.auth.secretRef`;

/** Unauthorized's fix depends on how the server is authenticated to. */
const UNAUTHORIZED_FIX: Record<string, string> = {
  None: 'the server requires authentication: set spec.auth (Bearer with a token in a Secret, or OAuthClientCredentials)',
  Bearer: `the server refuses the token: put a valid one under ${secretWords(MCP_TOKEN_KEY)}`,
  OAuthClientCredentials: `check spec.auth.clientId, spec.auth.scopes and ${secretWords(MCP_CLIENT_SECRET_KEY)}, and that the server accepts tokens issued for spec.auth.resource (default: the server's URL)`,
};

/** Cause and fix per reason: what the Ready condition says, and an Event on the transition. */
export const PROBLEMS: Record<McpProblemReason, (w: Words) => string> = {
  Unreachable: (w) =>
    `${w.detail} at ${w.endpoint}: check ${w.server.spec.stdio ? "the bridge's Service and pods" : 'spec.url (scheme, host, port)'} and that no NetworkPolicy or firewall keeps the operator out`,
  Unauthorized: (w) => `${w.detail}: ${UNAUTHORIZED_FIX[w.server.spec.auth?.method ?? 'None']}`,
  NotMcp: (w) =>
    `${w.detail}: ${w.endpoint} is not an MCP Streamable HTTP endpoint; point spec.url at the server's MCP path (often /mcp). Servers that speak only the 2024 SSE transport are not supported`,
  Timeout: (w) =>
    `${w.detail}: no answer within ${w.server.spec.timeoutSeconds ?? 60} s from ${w.endpoint}; the server hangs or is overloaded, or raise spec.timeoutSeconds`,
  ServerError: (w) => `${w.detail}: the server at ${w.endpoint} failed; its own logs say why`,
  SecretMissing: (w) => `${w.detail}: create it in namespace ${w.server.metadata.namespace} with that key`,
  SecretNotReadable: (w) => `${w.detail}, then upgrade the release`,
  AuthMisconfigured: (w) =>
    `${w.detail}: fix spec.auth (Bearer names a Secret in secretRef; OAuthClientCredentials an https tokenUrl, a clientId and a secretRef)`,
  TokenEndpointUnreachable: (w) =>
    `${w.detail}: check spec.auth.tokenUrl and that the operator can reach the authorization server`,
  BridgeNotReady: (w) =>
    `${w.detail}: kubectl describe deployment ${mcpBridgeName(w.server.metadata.name ?? '')} -n ${w.server.metadata.namespace} says why (unschedulable, image pull, the command failing); the image needs Node.js (npx) beside the server's command`,
  InvalidSpec: (w) => `${w.detail}: set exactly one of spec.url and spec.stdio`,
};

/** Failures a second try soon may not see: discovery comes back in 30 s, not at the next round. */
const TRANSIENT = new Set<McpProblemReason>([
  'Unreachable',
  'Timeout',
  'ServerError',
  'TokenEndpointUnreachable',
  'BridgeNotReady',
]);
export const isTransient = (reason: McpProblemReason): boolean => TRANSIENT.has(reason);

/** The condition's message of a problem. */
export function problemMessage(server: McpServer, problem: McpProblem | McpFailure): string {
  return PROBLEMS[problem.reason]({ server, detail: problem.detail, endpoint: mcpServerUrl(server) ?? '(none)' });
}

const truncate = (text: string): string =>
  text.length <= DESCRIPTION_MAX ? text : `${text.slice(0, DESCRIPTION_MAX - 1).trimEnd()}…`;

/** A listed tool as status keeps it: its name, and the start of its description. */
function servedTool(tool: { name: string; description?: string | undefined }): McpServedTool {
  return tool.description ? { name: tool.name, description: truncate(tool.description) } : { name: tool.name };
}

/** The tools status can hold: names within bounds, each once (a list keyed by name), at most STATUS_TOOLS_MAX. */
function listable<T extends { name: string }>(tools: readonly T[]): T[] {
  const seen = new Set<string>();
  return tools.filter((t) => {
    if (t.name.length === 0 || t.name.length > NAME_MAX || seen.has(t.name)) return false;
    seen.add(t.name);
    return true;
  });
}

const bounded = (info: { name: string; version: string }) => ({
  name: info.name.slice(0, INFO_MAX),
  version: info.version.slice(0, INFO_MAX),
});

export function mcpServerStatus(server: McpServer, outcome: McpDiscoveryOutcome, now: Date): McpServerStatus {
  const generation = server.metadata.generation ?? 0;
  const prev = server.status ?? {};
  const endpoint = mcpServerUrl(server);
  const filter = server.spec.tools;
  const status: McpServerStatus = { observedGeneration: generation };
  if (endpoint) status.endpoint = endpoint;
  if (outcome.ok) {
    const listed = outcome.tools;
    const named = listable(listed);
    const served = admittedTools(named, filter);
    const excluded = named.length - served.length;
    const shown = served.slice(0, STATUS_TOOLS_MAX);
    status.phase = 'Ready';
    if (outcome.protocolVersion) status.protocolVersion = outcome.protocolVersion.slice(0, 64);
    if (outcome.serverInfo) status.serverInfo = bounded(outcome.serverInfo);
    status.tools = shown.map(servedTool);
    status.lastDiscoveryTime = rfc3339(now);
    const notes = [
      excluded > 0 ? `${excluded} excluded by spec.tools` : '',
      named.length < listed.length
        ? `${listed.length - named.length} with an empty, overlong or repeated name left out`
        : '',
      served.length > shown.length ? `the first ${shown.length} listed here` : '',
    ].filter(Boolean);
    status.conditions = setCondition(
      prev.conditions,
      {
        type: 'Ready',
        status: 'True',
        reason: 'ToolsDiscovered',
        message: `serves ${served.length} of ${listed.length} tools through the gateway${notes.length ? ` (${notes.join('; ')})` : ''}`,
        observedGeneration: generation,
      },
      now,
    );
    return status;
  }
  // Not reached now: what the same endpoint served when last reached stays listed (narrowed to
  // today's spec), so the tools are known while the condition says why it cannot be used.
  status.phase = 'Degraded';
  if (prev.endpoint === endpoint) {
    if (prev.protocolVersion) status.protocolVersion = prev.protocolVersion;
    if (prev.serverInfo) status.serverInfo = prev.serverInfo;
    if (prev.tools) status.tools = admittedTools(prev.tools, filter);
    if (prev.lastDiscoveryTime) status.lastDiscoveryTime = prev.lastDiscoveryTime;
  }
  status.conditions = setCondition(
    prev.conditions,
    {
      type: 'Ready',
      status: 'False',
      reason: outcome.problem.reason,
      message: problemMessage(server, outcome.problem),
      observedGeneration: generation,
    },
    now,
  );
  return status;
}
