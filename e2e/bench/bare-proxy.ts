import { Agent, createServer, type IncomingHttpHeaders, request } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * The floor any Node proxy reaches on this machine: node:http in, a keep-alive agent out, request and response piped
 * through untouched. No auth, parsing, routing or accounting, so what a real gateway costs above this is its
 * features (and its framework), not Node's HTTP stack.
 * Run: node --import tsx e2e/bench/bare-proxy.ts <upstream base url>; prints {"url":"http://127.0.0.1:PORT"}.
 */

/** Per-connection headers a proxy must not forward (RFC 9110 §7.6.1); Node frames the body itself. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'te', 'trailer', 'upgrade']);

function endToEnd(headers: IncomingHttpHeaders): IncomingHttpHeaders {
  const out: IncomingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) if (!HOP_BY_HOP.has(name)) out[name] = value;
  return out;
}

const upstream = new URL(process.argv[2] ?? 'http://127.0.0.1:11434');
const agent = new Agent({ keepAlive: true });

const server = createServer((req, res) => {
  const out = request(
    {
      host: upstream.hostname,
      port: upstream.port,
      method: req.method,
      path: req.url,
      headers: endToEnd(req.headers),
      agent,
    },
    (up) => {
      res.writeHead(up.statusCode ?? 502, endToEnd(up.headers));
      up.pipe(res);
    },
  );
  out.on('error', () => {
    if (!res.headersSent) res.writeHead(502);
    res.end();
  });
  // A client that leaves mid-response must not keep the upstream exchange (and its socket) busy.
  res.on('close', () => {
    if (!res.writableFinished) out.destroy();
  });
  req.pipe(out);
});

// The accept queue the proxy has (proxy/serve.ts LISTEN_BACKLOG): a burst of connections is not what is compared.
server.listen({ port: 0, host: '127.0.0.1', backlog: 4096 }, () => {
  console.log(JSON.stringify({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }));
});
// Started by the benchmark with an IPC channel: when it goes away, so does this proxy.
process.on('disconnect', () => process.exit(0));
// An orderly exit, so that `--cpu-prof` (profile.ts) writes its profile.
process.once('SIGTERM', () => process.exit(0));
