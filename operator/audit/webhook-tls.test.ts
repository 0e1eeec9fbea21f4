import { once } from 'node:events';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { makeWebhookTls } from './webhook-tls.js';

describe('makeWebhookTls', () => {
  it('makes a certificate a client trusting only its CA accepts for the names given, and refuses for others', async () => {
    const tls = makeWebhookTls(['audit.platform-agent.svc', '127.0.0.1']);
    const server = createServer({ key: tls.key, cert: tls.cert }, (_req, res) => res.end('ok'));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    const get = (servername: string) =>
      new Promise<string>((resolve, reject) => {
        import('node:https').then(({ request }) => {
          const req = request({ host: '127.0.0.1', port, ca: tls.ca, servername, path: '/' }, (res) => {
            res.setEncoding('utf8');
            let body = '';
            res.on('data', (c: string) => {
              body += c;
            });
            res.on('end', () => resolve(body));
          });
          req.on('error', reject);
          req.end();
        }, reject);
      });
    try {
      await expect(get('audit.platform-agent.svc')).resolves.toBe('ok');
      await expect(get('other.example')).rejects.toThrow(/altnames|Hostname/i);
    } finally {
      server.close();
    }
  });
});
