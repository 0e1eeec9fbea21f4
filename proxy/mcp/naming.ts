/**
 * How the federated endpoint (/mcp) names what its servers serve, so that names from different
 * servers never collide and every call finds its server again:
 *
 *   tools, prompts, resource and template names   <server>_<name>    (github_search_issues)
 *   resource URIs and URI templates               <server>+<uri>     (docs+file:///guide.md)
 *
 * A server's name is its McpServer's, a DNS label (lowercase letters, digits, '-'), which never
 * holds '_' or '+': the first '_' of a tool's name, and the first '+' of a URI, end the server's
 * name. A URI stays a URI: "<server>+<scheme>" is a valid scheme. /mcp/<server> serves one server
 * with its own names (single naming).
 */

export interface Naming {
  name(server: string, name: string): string;
  /** The server and its own name of a name this endpoint gave out; undefined: not one of ours. */
  parseName(name: string): { server: string; name: string } | undefined;
  uri(server: string, uri: string): string;
  parseUri(uri: string): { server: string; uri: string } | undefined;
}

const SERVER = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

export const federatedNaming: Naming = {
  name: (server, name) => `${server}_${name}`,
  parseName: (full) => split(full, '_'),
  uri: (server, uri) => `${server}+${uri}`,
  parseUri: (full) => split(full, '+'),
};

export function singleNaming(server: string): Naming {
  return {
    name: (_, name) => name,
    parseName: (name) => ({ server, name }),
    uri: (_, uri) => uri,
    parseUri: (uri) => ({ server, uri }),
  };
}

function split(full: string, at: string): { server: string; name: string; uri: string } | undefined {
  const i = full.indexOf(at);
  if (i <= 0 || i === full.length - 1) return undefined;
  const server = full.slice(0, i);
  if (!SERVER.test(server)) return undefined;
  const rest = full.slice(i + 1);
  return { server, name: rest, uri: rest };
}
