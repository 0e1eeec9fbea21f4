import { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/client';

/**
 * The MCP revisions the gateway speaks: those of the official SDK it is built with, newest
 * first (2025-11-25 down to 2024-11-05). A client asking for one of them gets it; any other
 * request gets the newest, and the client decides whether it can go on (the spec's
 * negotiation). A request without an MCP-Protocol-Version header is served as its session's
 * revision (the spec lets a server assume 2025-03-26; every revision's messages pass through alike).
 */

const LATEST_VERSION: string = LATEST_PROTOCOL_VERSION;
export const VERSIONS: readonly string[] = SUPPORTED_PROTOCOL_VERSIONS;

export const negotiate = (requested: unknown): string =>
  typeof requested === 'string' && VERSIONS.includes(requested) ? requested : LATEST_VERSION;
