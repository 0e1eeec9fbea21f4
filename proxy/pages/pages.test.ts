import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { pagesRoutes } from './pages.js';

/**
 * What the gateway serves for the Usage and Analytics pages, without a browser: the pages, their
 * assets and headers, and the browser script's types. The pages in a real browser are e2e
 * (e2e/no-cluster/ui-pages.e2e.test.ts).
 */

describe('UI pages', () => {
  it('serves the pages and assets from the gateway itself, with a CSP that allows only this origin', async () => {
    const ui = pagesRoutes();
    const html = await ui.request('/ui/usage');
    expect(html.status).toBe(200);
    expect(html.headers.get('content-type')).toContain('text/html');
    expect(html.headers.get('content-security-policy')).toContain("default-src 'none'");
    expect(html.headers.get('content-security-policy')).toContain("connect-src 'self'");
    const body = await html.text();
    expect(body).not.toMatch(/https?:\/\//);
    for (const [file, type] of [
      ['app.js', 'text/javascript'],
      ['ui.css', 'text/css'],
      ['uPlot.esm.js', 'text/javascript'],
      ['uPlot.min.css', 'text/css'],
    ] as const) {
      const res = await ui.request(`/ui/assets/${file}`);
      expect(res.status, file).toBe(200);
      expect(res.headers.get('content-type')).toContain(type);
      const etag = res.headers.get('etag') ?? '';
      expect((await ui.request(`/ui/assets/${file}`, { headers: { 'if-none-match': etag } })).status).toBe(304);
    }
    expect((await ui.request('/ui/assets/secrets.txt')).status).toBe(404);
    expect((await ui.request('/ui/assets/..%2Fpages.ts')).status).toBe(404);
    expect((await ui.request('/ui')).headers.get('location')).toBe('/ui/usage');
  });

  it('shows list and actual cost on both pages, and the GPU time table on Usage only', async () => {
    const ui = pagesRoutes();
    const usage = await (await ui.request('/ui/usage')).text();
    const analytics = await (await ui.request('/ui/analytics')).text();
    for (const html of [usage, analytics]) {
      expect(html).toContain('data-field="costUsd"');
      expect(html).toContain('data-field="actualCostUsd" data-format="usd" data-testid="total-actual-cost"');
      expect(html).toMatch(/<th scope="col" class="num" data-field="actualCostUsd"/);
    }
    for (const field of ['gpuSeconds" data-format="hours', 'gpuCostUsd', 'idleCostUsd']) {
      expect(usage).toContain(`data-field="${field}"`);
      expect(analytics).not.toContain(`data-field="${field}"`);
    }
    expect(usage).toContain('data-testid="deployment-table"');
  });

  it('shows routing savings beside the free-credit savings, and routed requests by served model on both pages', async () => {
    const ui = pagesRoutes();
    const usage = await (await ui.request('/ui/usage')).text();
    const analytics = await (await ui.request('/ui/analytics')).text();
    // Usage: the two savings side by side, in the totals and in the table by model, endpoint, provider or tag.
    expect(usage).toMatch(
      /data-field="savingsUsd" data-format="usd" data-testid="total-savings">[\s\S]*?<dd data-field="routingSavingsUsd" data-format="usd" data-testid="total-routing-savings">/,
    );
    expect(usage).toContain(
      '<th scope="col" class="num" data-field="savingsUsd" data-format="usd">Free-credit savings (USD)</th><th scope="col" class="num" data-field="routingSavingsUsd" data-format="usd">Routing savings (USD)</th>',
    );
    expect(usage).toContain('data-field="routedRequests" data-format="int" data-testid="total-routed"');
    for (const html of [usage, analytics])
      expect(html).toContain('data-field="undeliveredRequests" data-format="int" data-testid="total-undelivered"');
    expect(analytics).toContain(
      'data-field="escalationRate" data-format="percent" data-testid="total-escalation-rate"',
    );
    expect(analytics).toMatch(/<th scope="col" class="num" data-field="escalationRate" data-format="percent">/);
    expect(analytics).not.toContain('data-field="routingSavingsUsd" data-format="usd" data-testid');
    for (const html of [usage, analytics]) {
      expect(html).toContain('data-testid="routing-table"');
      expect(html).toContain('<th scope="col">Served model</th>');
      for (const field of ['routedRequests" data-format="int', 'share" data-format="percent', 'escalationRate']) {
        expect(html).toContain(`data-field="${field}`);
      }
      expect(html).toContain('data-testid="routing-empty"');
      // Above the Tools table.
      expect(html.indexOf('routing-table')).toBeLessThan(html.indexOf('tool-table'));
    }
  });

  it('the browser script type-checks (tsc -p proxy/pages: JSDoc types, DOM lib, uPlot types)', async () => {
    const tsc = fileURLToPath(new URL('../../node_modules/typescript/bin/tsc', import.meta.url));
    const project = fileURLToPath(new URL('./', import.meta.url));
    await expect(promisify(execFile)(process.execPath, [tsc, '-p', project])).resolves.toBeDefined();
  }, 20_000);
});
