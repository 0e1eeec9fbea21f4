import { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS } from '@modelcontextprotocol/client';

/**
 * The MCP revisions the gateway speaks: those of the official SDK it is built with, newest
 * first (2025-11-25 down to 2024-11-05). A client asking for one of them gets it; any other
 * request gets the newest, and the client decides whether it can go on (the spec's
 * negotiation). Without an MCP-Protocol-Version header a request is taken as 2025-03-26, as
 * the spec says.
 */

export const LATEST_VERSION: string = LATEST_PROTOCOL_VERSION;
export const VERSIONS: readonly string[] = SUPPORTED_PROTOCOL_VERSIONS;
export const HEADERLESS_VERSION = '2025-03-26';

export const negotiate = (requested: unknown): string =>
  typeof requested === 'string' && VERSIONS.includes(requested) ? requested : LATEST_VERSION;
