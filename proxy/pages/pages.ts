import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { Hono } from 'hono';

/**
 * The gateway's Usage and Analytics pages: static HTML shells, one hand-written ES module
 * (app.js, served as-is, no build step), a stylesheet and the uPlot chart library, all served by
 * the gateway itself so the pages load nothing from any other host.
 *
 * The pages hold no data: app.js calls /v1/usage, /v1/analytics, /v1/usage/routing, /v1/usage/tools and /v1/tags with the API key the
 * user types in, so these routes need no auth. What each page shows (totals cards, table columns,
 * chart metrics) is declared here as data-* attributes; app.js is generic and reads them.
 */

/** `hours`: a number of seconds, shown in hours; `bytes`: a size, shown in B, KiB, MiB, GiB. */
type Format = 'int' | 'usd' | 'percent' | 'ms' | 'hours' | 'bytes';

interface Field {
  /** Dotted path into a totals/group/series object, e.g. `latencyMs.p95`. */
  path: string;
  label: string;
  format: Format;
  testId?: string;
}

interface ChartMetric extends Field {
  /** A bucket the API left out had no requests: zero for counts and sums, a gap for latencies. */
  missing: 'zero' | 'gap';
}

interface PageSpec {
  name: 'usage' | 'analytics';
  title: string;
  intro: string;
  totals: Field[];
  /** First one is the default. */
  chart: ChartMetric[];
  columns: Field[];
  /** Columns of the in-cluster deployments' GPU time table (the report's `deployments`), where the page has one. */
  deployments?: Field[];
}

/**
 * Columns of the Tools table on both pages: tool calls through the gateway's /mcp routes by MCP
 * server and tool (GET /v1/usage/tools), which the model figures above it leave out.
 */
const TOOL_COLUMNS: Field[] = [
  { path: 'calls', label: 'Calls', format: 'int' },
  { path: 'errors', label: 'Errors', format: 'int' },
  { path: 'errorRate', label: 'Error rate', format: 'percent' },
  { path: 'latencyMs.p50', label: 'p50', format: 'ms' },
  { path: 'latencyMs.p95', label: 'p95', format: 'ms' },
  { path: 'bytesIn', label: 'Bytes in', format: 'bytes' },
  { path: 'bytesOut', label: 'Bytes out', format: 'bytes' },
];

/**
 * Columns of the Routing table on both pages: requests a RoutingPolicy routed, by the model that
 * served them (GET /v1/usage/routing?groupBy=model).
 */
const ROUTING_COLUMNS: Field[] = [
  { path: 'routedRequests', label: 'Routed requests', format: 'int' },
  { path: 'share', label: 'Share of routed', format: 'percent' },
  { path: 'escalationRate', label: 'Escalation rate', format: 'percent' },
  { path: 'routedCostUsd', label: 'Cost (USD)', format: 'usd' },
  { path: 'routingSavingsUsd', label: 'Routing savings (USD)', format: 'usd' },
];

const ROUTING_NOTE =
  'Requests a RoutingPolicy sent to a cheaper model than the one asked for (or chose for model auto), by the model that served them, with the same tag and time filters. Escalation rate: the routed requests its cascade escalated. Routing savings: what the model asked for would have cost, less what was paid (escalations included); free-credit savings are counted apart.';

const AUDIT_NOTE =
  "Changes to the gateway's Kubernetes objects (who, what, before and after, secrets redacted), sign-ins, refused credentials and denied admin actions, newest first, in the range above (the newest 50 shown; Export gives them all). A User key sees its own team's records.";
const TOOLS_NOTE =
  'Tool calls through the /mcp routes, by MCP server and tool, with the same tag and time filters. They are not counted in the model figures above (they use no tokens).';

/**
 * What list and actual cost mean, beside the figures: list is tokens at a price per token, actual
 * is GPU time shared by the tokens served (proxy/usage/gpu-cost.ts, gpuCostCtes).
 */
const COST_NOTE =
  'Cost is the list price of the tokens. Actual cost is what in-cluster models really cost: their GPU time, shared by the tokens they served in each hour (other providers: the list price).';

const USAGE: PageSpec = {
  name: 'usage',
  title: 'Usage',
  intro:
    'Requests, tokens and cost of every endpoint (chat completions, completions, embeddings, Responses and Anthropic Messages), by model, endpoint, provider or tag; routing savings beside free-credit savings, routed requests by served model; tool calls through /mcp by server and tool.',
  totals: [
    { path: 'requests', label: 'Requests', format: 'int', testId: 'total-requests' },
    // Answers a crash or a departed caller kept from their callers: not served, their cost counted.
    { path: 'undeliveredRequests', label: 'Not delivered', format: 'int', testId: 'total-undelivered' },
    // Served by models their providers deprecated: what still has to move before they retire.
    { path: 'deprecatedRequests', label: 'On deprecated models', format: 'int', testId: 'total-deprecated' },
    { path: 'inputTokens', label: 'Input tokens', format: 'int', testId: 'total-input-tokens' },
    { path: 'outputTokens', label: 'Output tokens', format: 'int', testId: 'total-output-tokens' },
    { path: 'costUsd', label: 'Cost (USD)', format: 'usd', testId: 'total-cost' },
    { path: 'actualCostUsd', label: 'Actual cost (USD)', format: 'usd', testId: 'total-actual-cost' },
    { path: 'savingsUsd', label: 'Free-credit savings (USD)', format: 'usd', testId: 'total-savings' },
    // Beside the free credits', never added to them: a request may have both.
    { path: 'routingSavingsUsd', label: 'Routing savings (USD)', format: 'usd', testId: 'total-routing-savings' },
    { path: 'routedRequests', label: 'Routed requests', format: 'int', testId: 'total-routed' },
    { path: 'escalationRate', label: 'Escalation rate', format: 'percent', testId: 'total-escalation-rate' },
  ],
  chart: [
    { path: 'costUsd', label: 'Cost (USD)', format: 'usd', missing: 'zero' },
    { path: 'actualCostUsd', label: 'Actual cost (USD)', format: 'usd', missing: 'zero' },
    { path: 'routingSavingsUsd', label: 'Routing savings (USD)', format: 'usd', missing: 'zero' },
    { path: 'requests', label: 'Requests', format: 'int', missing: 'zero' },
  ],
  columns: [
    { path: 'requests', label: 'Requests', format: 'int' },
    { path: 'inputTokens', label: 'Input tokens', format: 'int' },
    { path: 'outputTokens', label: 'Output tokens', format: 'int' },
    { path: 'costUsd', label: 'Cost (USD)', format: 'usd' },
    { path: 'actualCostUsd', label: 'Actual cost (USD)', format: 'usd' },
    { path: 'savingsUsd', label: 'Free-credit savings (USD)', format: 'usd' },
    { path: 'routingSavingsUsd', label: 'Routing savings (USD)', format: 'usd' },
  ],
  deployments: [
    { path: 'gpuSeconds', label: 'GPU time', format: 'hours' },
    { path: 'gpuCostUsd', label: 'GPU cost (USD)', format: 'usd' },
    { path: 'idleCostUsd', label: 'Idle cost (USD)', format: 'usd' },
  ],
};

const ANALYTICS: PageSpec = {
  name: 'analytics',
  title: 'Analytics',
  intro:
    'Request volume (served; answers that never reached their callers apart), errors and latency percentiles of every endpoint (chat completions, completions, embeddings, Responses and Anthropic Messages), by model, endpoint, provider or tag; routed requests and their escalations by served model; tool calls through /mcp by server and tool.',
  totals: [
    { path: 'costUsd', label: 'Cost (USD)', format: 'usd', testId: 'total-cost' },
    { path: 'actualCostUsd', label: 'Actual cost (USD)', format: 'usd', testId: 'total-actual-cost' },
    { path: 'requests', label: 'Requests', format: 'int', testId: 'total-requests' },
    { path: 'errorRate', label: 'Error rate', format: 'percent', testId: 'total-error-rate' },
    { path: 'undeliveredRequests', label: 'Not delivered', format: 'int', testId: 'total-undelivered' },
    { path: 'latencyMs.p50', label: 'Latency p50', format: 'ms', testId: 'latency-p50' },
    { path: 'latencyMs.p95', label: 'Latency p95', format: 'ms', testId: 'latency-p95' },
    { path: 'latencyMs.p99', label: 'Latency p99', format: 'ms', testId: 'latency-p99' },
    { path: 'escalationRate', label: 'Escalation rate', format: 'percent', testId: 'total-escalation-rate' },
  ],
  chart: [
    { path: 'requests', label: 'Requests', format: 'int', missing: 'zero' },
    { path: 'latencyMs.p95', label: 'Latency p95', format: 'ms', missing: 'gap' },
  ],
  columns: [
    { path: 'requests', label: 'Requests', format: 'int' },
    { path: 'errorRate', label: 'Error rate', format: 'percent' },
    { path: 'costUsd', label: 'Cost (USD)', format: 'usd' },
    { path: 'actualCostUsd', label: 'Actual cost (USD)', format: 'usd' },
    { path: 'latencyMs.p50', label: 'p50', format: 'ms' },
    { path: 'latencyMs.p95', label: 'p95', format: 'ms' },
    { path: 'latencyMs.p99', label: 'p99', format: 'ms' },
    { path: 'routedRequests', label: 'Routed', format: 'int' },
    { path: 'escalationRate', label: 'Escalation rate', format: 'percent' },
  ],
};

/** The import map lets app.js say `import uPlot from 'uplot'`, which tsc also resolves to uPlot's types. */
const IMPORT_MAP = JSON.stringify({ imports: { uplot: '/ui/assets/uPlot.esm.js' } });

// Inline scripts are refused by the CSP below except this one, allowed by its hash.
const IMPORT_MAP_HASH = createHash('sha256').update(IMPORT_MAP).digest('base64');

/**
 * Only this origin: the pages must never load from or send the API key to another host. uPlot
 * styles its elements through the CSSOM (element.style), which style-src does not restrict.
 */
const CSP = [
  "default-src 'none'",
  `script-src 'self' 'sha256-${IMPORT_MAP_HASH}'`,
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const esc = (s: string): string => s.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);

function fieldAttrs(f: Field): string {
  return `data-field="${esc(f.path)}" data-format="${f.format}"`;
}

/** The filters both pages share: tags, the time range, granularity, grouping. */
const FILTERS = `    <form id="filters" class="filters" novalidate>
      <div class="field wide">
        <label for="tag-filter">Tags</label>
        <input id="tag-filter" data-testid="tag-filter" list="tag-suggestions" autocomplete="off" spellcheck="false"
          placeholder="team:ml project:x" aria-describedby="tag-help">
        <datalist id="tag-suggestions"></datalist>
        <small id="tag-help">key:value, several separated by commas or spaces; all must match.</small>
      </div>
      <div class="field">
        <label for="from">From</label>
        <input id="from" data-testid="from" type="datetime-local" required>
      </div>
      <div class="field">
        <label for="to">To</label>
        <input id="to" data-testid="to" type="datetime-local" required>
      </div>
      <div class="field">
        <label for="granularity">Granularity</label>
        <select id="granularity" data-testid="granularity">
          <option value="hour">Hour</option>
          <option value="day">Day</option>
        </select>
      </div>
      <div class="field">
        <label for="group-by">Group by</label>
        <select id="group-by" data-testid="group-by">
          <option value="model">Model</option>
          <option value="endpoint">Endpoint</option>
          <option value="provider">Provider</option>
          <option value="tag">Tag key…</option>
        </select>
      </div>
      <div class="field" id="tag-key-field" hidden>
        <label for="tag-key">Tag key</label>
        <input id="tag-key" data-testid="tag-key" autocomplete="off" spellcheck="false" placeholder="team">
      </div>
      <div class="field actions">
        <button id="apply" data-testid="apply" type="submit">Apply</button>
      </div>
    </form>`;

/**
 * The in-cluster deployments' GPU time over the range: what the platform paid for, and how much
 * of it no request used. The API reports it to Admin keys only (a deployment serves every team).
 */
function deploymentsPanel(columns: Field[]): string {
  const heads = columns.map((f) => `<th scope="col" class="num" ${fieldAttrs(f)}>${esc(f.label)}</th>`).join('');
  return `
    <section class="panel" aria-labelledby="deployments-title">
      <h2 id="deployments-title">In-cluster GPU time</h2>
      <div class="table-wrap">
        <table id="deployment-table" data-testid="deployment-table">
          <thead><tr><th scope="col">Deployment</th><th scope="col">Model</th>${heads}</tr></thead>
          <tbody></tbody>
        </table>
      </div>
      <p id="deployments-empty" class="note">No GPU time measured in this range (Admin keys only).</p>
    </section>
`;
}

/** Routed requests by served model (GET /v1/usage/routing), on both pages. */
function routingPanel(): string {
  const heads = ROUTING_COLUMNS.map((f) => `<th scope="col" class="num" ${fieldAttrs(f)}>${esc(f.label)}</th>`).join(
    '',
  );
  return `
    <section class="panel" aria-labelledby="routing-title">
      <h2 id="routing-title">Routing (RoutingPolicy)</h2>
      <div class="table-wrap">
        <table id="routing-table" data-testid="routing-table">
          <thead><tr><th scope="col">Served model</th>${heads}</tr></thead>
          <tbody></tbody>
          <tfoot></tfoot>
        </table>
      </div>
      <p id="routing-empty" data-testid="routing-empty" class="note">Enter an API key and press Apply.</p>
      <p class="note">${esc(ROUTING_NOTE)}</p>
    </section>
`;
}

/** Tool calls by server and tool (GET /v1/usage/tools), on both pages. */
function toolsPanel(): string {
  const heads = TOOL_COLUMNS.map((f) => `<th scope="col" class="num" ${fieldAttrs(f)}>${esc(f.label)}</th>`).join('');
  return `
    <section class="panel" aria-labelledby="tools-title">
      <h2 id="tools-title">Tools (MCP)</h2>
      <div class="table-wrap">
        <table id="tool-table" data-testid="tool-table">
          <thead><tr><th scope="col">Server</th><th scope="col">Tool</th>${heads}</tr></thead>
          <tbody></tbody>
          <tfoot></tfoot>
        </table>
      </div>
      <p id="tools-empty" data-testid="tools-empty" class="note">Enter an API key and press Apply.</p>
      <p class="note">${esc(TOOLS_NOTE)}</p>
    </section>
`;
}

/**
 * Guardrail findings over the range (GET /v1/usage/guardrails), on both pages: by team, or by the
 * tag key the report is grouped by; never the text found.
 */
function guardrailsPanel(): string {
  const heads = ['Guardrail', 'Category', 'Action', 'Where'].map((h) => `<th scope="col">${h}</th>`).join('');
  return `
    <section class="panel" aria-labelledby="guardrails-title">
      <h2 id="guardrails-title">Guardrails</h2>
      <div class="table-wrap">
        <table id="guardrail-table" data-testid="guardrail-table">
          <thead><tr><th scope="col" id="guardrail-group">Team</th>${heads}<th scope="col" class="num">Requests</th><th scope="col" class="num">Findings</th></tr></thead>
          <tbody></tbody>
        </table>
      </div>
      <p id="guardrails-empty" data-testid="guardrails-empty" class="note">Enter an API key and press Apply.</p>
      <p class="note">${esc(GUARDRAILS_NOTE)}</p>
    </section>
`;
}

const GUARDRAILS_NOTE =
  'What Guardrails found in requests and answers, and what they did (Block, Redact, Mask, RouteInCluster, Log): counted, never the text.';

/**
 * The audit trail over the range (GET /v1/audit), on both pages: who changed what and when, sign-ins,
 * refusals and denied admin actions. A User key sees its own team's records; an Admin every one.
 */
function auditPanel(): string {
  return `
    <section class="panel" aria-labelledby="audit-title">
      <div class="panel-head">
        <h2 id="audit-title">Audit trail</h2>
        <button id="audit-export" data-testid="audit-export" type="button">Export (NDJSON)</button>
      </div>
      <div class="table-wrap">
        <table id="audit-table" data-testid="audit-table">
          <thead><tr><th scope="col">When</th><th scope="col">Who</th><th scope="col">Action</th><th scope="col">Object</th><th scope="col">Changed</th><th scope="col">From</th></tr></thead>
          <tbody></tbody>
        </table>
      </div>
      <p id="audit-empty" data-testid="audit-empty" class="note">Enter an API key and press Apply.</p>
      <p class="note">${esc(AUDIT_NOTE)}</p>
    </section>
`;
}

function renderPage(page: PageSpec): string {
  const nav = [USAGE, ANALYTICS]
    .map(
      (p) =>
        `<a href="/ui/${p.name}" data-nav="${p.name}"${p.name === page.name ? ' aria-current="page"' : ''}>${esc(p.title)}</a>`,
    )
    .join('');
  const cards = page.totals
    .map(
      (f) => `<div class="card">
          <dt>${esc(f.label)}</dt>
          <dd ${fieldAttrs(f)}${f.testId ? ` data-testid="${f.testId}"` : ''}>–</dd>
        </div>`,
    )
    .join('\n        ');
  const metrics = page.chart
    .map(
      (m, i) =>
        `<label><input type="radio" name="metric" value="${esc(m.path)}" data-format="${m.format}" data-missing="${m.missing}" data-label="${esc(m.label)}"${i === 0 ? ' checked' : ''}> ${esc(m.label)}</label>`,
    )
    .join('\n            ');
  const heads = page.columns.map((f) => `<th scope="col" class="num" ${fieldAttrs(f)}>${esc(f.label)}</th>`).join('');
  const deployments = page.deployments ? deploymentsPanel(page.deployments) : '';

  return `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>${esc(page.title)} · LLM gateway</title>
  <link rel="stylesheet" href="/ui/assets/uPlot.min.css">
  <link rel="stylesheet" href="/ui/assets/ui.css">
  <script type="importmap">${IMPORT_MAP}</script>
  <script type="module" src="/ui/assets/app.js"></script>
</head>
<body data-page="${page.name}">
  <header class="top">
    <div class="brand">LLM gateway</div>
    <nav aria-label="Pages">${nav}</nav>
    <div class="key">
      <span id="signed-in" data-testid="signed-in" hidden></span>
      <button id="sign-out" data-testid="sign-out" type="button" hidden>Sign out</button>
      <span id="key-entry">
        <label for="api-key">API key</label>
        <input id="api-key" data-testid="api-key" type="password" autocomplete="off" spellcheck="false" placeholder="sk-…">
      </span>
      <a id="sign-in" data-testid="sign-in" href="/ui/sign-in" hidden>Sign in</a>
    </div>
  </header>
  <main>
    <h1>${esc(page.title)}</h1>
    <p class="intro">${esc(page.intro)}</p>

${FILTERS}

    <div id="error" data-testid="error" class="alert" role="alert" hidden></div>

    <section aria-label="Totals">
      <dl class="totals" data-testid="totals">
        ${cards}
      </dl>
    </section>

    <section class="panel" aria-labelledby="chart-title">
      <div class="panel-head">
        <h2 id="chart-title">Over time</h2>
        <fieldset class="toggle">
          <legend class="sr-only">Chart metric</legend>
            ${metrics}
        </fieldset>
      </div>
      <div id="chart" data-testid="chart" class="chart" role="img" aria-label="Chart over time, one line per group"></div>
      <p id="chart-note" class="note" hidden></p>
    </section>

    <section class="panel" aria-labelledby="table-title">
      <h2 id="table-title">By <span id="group-label">model</span></h2>
      <div class="table-wrap">
        <table id="group-table" data-testid="group-table">
          <thead><tr><th scope="col" id="group-head">Model</th>${heads}</tr></thead>
          <tbody></tbody>
          <tfoot></tfoot>
        </table>
      </div>
      <p id="table-empty" class="note">Enter an API key and press Apply.</p>
      <p class="note">${esc(COST_NOTE)}</p>
    </section>
${deployments}${routingPanel()}${toolsPanel()}${guardrailsPanel()}${auditPanel()}  </main>
</body>
</html>
`;
}

interface Asset {
  body: Buffer;
  type: string;
  etag: string;
}

const here = (file: string): string => fileURLToPath(new URL(file, import.meta.url));

function readAsset(path: string, type: string): Asset {
  let body: Buffer;
  try {
    body = readFileSync(path);
  } catch (err) {
    // A build that copied only compiled .ts into dist/ would land here: say what is missing.
    throw new Error(`UI asset ${path} is missing: ship proxy/pages/app.js and ui.css next to pages.js`, { cause: err });
  }
  return { body, type, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"` };
}

function loadAssets(): Map<string, Asset> {
  const require = createRequire(import.meta.url);
  const js = 'text/javascript; charset=utf-8';
  const css = 'text/css; charset=utf-8';
  return new Map([
    ['app.js', readAsset(here('./app.js'), js)],
    ['ui.css', readAsset(here('./ui.css'), css)],
    ['uPlot.esm.js', readAsset(require.resolve('uplot/dist/uPlot.esm.js'), js)],
    ['uPlot.min.css', readAsset(require.resolve('uplot/dist/uPlot.min.css'), css)],
  ]);
}

const COMMON_HEADERS = {
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

/**
 * Routes: GET /ui/usage, GET /ui/analytics (HTML), GET /ui/assets/<file> (the page script, CSS
 * and the chart library). No auth on these static files: they contain no data; the pages call
 * the data APIs with the user's API key. Files are read once, here, at startup.
 */
export function pagesRoutes(): Hono {
  const assets = loadAssets();
  const pages = new Map([USAGE, ANALYTICS].map((p) => [p.name, renderPage(p)]));
  const app = new Hono();

  app.get('/ui', (c) => c.redirect('/ui/usage'));
  app.get('/ui/', (c) => c.redirect('/ui/usage'));

  for (const [name, html] of pages) {
    app.get(`/ui/${name}`, (c) =>
      c.body(html, 200, {
        ...COMMON_HEADERS,
        'content-type': 'text/html; charset=utf-8',
        'content-security-policy': CSP,
        // The shell is tiny and names assets without a version: always revalidate.
        'cache-control': 'no-cache',
      }),
    );
  }

  app.get('/ui/assets/:file', (c) => {
    const asset = assets.get(c.req.param('file'));
    if (!asset) return c.text('not found', 404, COMMON_HEADERS);
    const headers = {
      ...COMMON_HEADERS,
      'content-type': asset.type,
      etag: asset.etag,
      // Unversioned URLs: revalidate each time; the ETag makes that a 304 with no body.
      'cache-control': 'no-cache',
    };
    if (c.req.header('if-none-match') === asset.etag) return c.body(null, 304, headers);
    return c.body(new Uint8Array(asset.body), 200, headers);
  });

  return app;
}
