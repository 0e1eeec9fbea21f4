import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { NodeHttpHandler } from '@smithy/node-http-handler';

/**
 * How the gateway's Bedrock runtime clients reach Bedrock, chosen rather than inherited.
 *
 * The SDK's default for this client (@aws-sdk/client-bedrock-runtime 3.11xx) is NodeHttp2Handler
 * with disableConcurrentStreams: every call opens its own HTTP/2 session (a TCP and TLS handshake)
 * and closes it after, so nothing is reused. Its other handler, NodeHttpHandler, defaults to 50
 * sockets per client and queues the rest inside the SDK, where the gateway neither bounds, times
 * nor meters them (it only logs a warning).
 *
 * Here: HTTP/1.1 with keep-alive and no socket cap. A stream holds one socket for its life and the
 * socket is reused by the next call; how many run at once is the gateway's own business (its
 * connection limit and request memory budget), never a pool's. One socket per stream also keeps
 * backpressure per stream: a caller reading slowly stops its own socket, where HTTP/2 would share
 * one connection's flow-control window among every stream on it.
 */
export function bedrockRequestHandler(opts: { connectMs: number }): NodeHttpHandler {
  const agent = { keepAlive: true, maxSockets: Number.POSITIVE_INFINITY, maxFreeSockets: 256 };
  return new NodeHttpHandler({
    httpAgent: new HttpAgent(agent),
    httpsAgent: new HttpsAgent(agent),
    connectionTimeout: opts.connectMs,
  });
}
