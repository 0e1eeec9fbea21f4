import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import { KubeClient } from '../../crds/kube/kube-client.js';

/**
 * A loopback stand-in for the API server, for unit tests that need it to fail or answer on
 * demand (the real one runs in the e2e tier): plain HTTP, each request handed whole to the
 * test's handler, and the kubeconfig that points a KubeClient at it.
 */

export type KubeApiHandler = (req: IncomingMessage, res: ServerResponse, body: string) => void;

export interface KubeApiDouble {
  client: KubeClient;
  close(): Promise<void>;
}

/** A kubeconfig whose current context is the plain-HTTP server at `url`. */
export function loopbackKubeConfig(url: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    // client-node refuses plain HTTP unless TLS verification is off.
    clusters: [{ name: 'double', server: url, skipTLSVerify: true }],
    users: [{ name: 'test' }],
    contexts: [{ name: 'double', cluster: 'double', user: 'test' }],
    currentContext: 'double',
  });
  return kc;
}

export async function startKubeApiDouble(handle: KubeApiHandler): Promise<KubeApiDouble> {
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => {
      body += c.toString();
    });
    req.on('end', () => handle(req, res, body));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    client: new KubeClient(loopbackKubeConfig(`http://127.0.0.1:${port}`)),
    close: () => {
      // Calls a test left held end with the double.
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
