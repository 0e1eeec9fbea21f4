// @ts-check
/**
 * Browser script of the gateway's Usage and Analytics pages (with their Routing table, from
 * /v1/usage/routing, and Tools table, from /v1/usage/tools), served as-is by proxy/pages/pages.ts:
 * a plain ES module so no bundler is needed; `tsc -p proxy/pages` checks it through the JSDoc types.
 * The HTML declares what a page shows (data-field / data-format attributes on the totals cards,
 * the table headers and the chart metric radios); this script fetches, formats and draws.
 * Everything that comes from the API is written with textContent, never parsed as HTML: group
 * names are tag values that any caller can choose.
 */
import uPlot from 'uplot';

/** @typedef {'int' | 'usd' | 'percent' | 'ms' | 'hours' | 'bytes'} Format */
/** @typedef {{ [key: string]: unknown }} Obj */
/** @typedef {{ totals: Obj, series: Obj[], groups: Obj[], deployments: Obj[] }} Report */
/**
 * A report of a table of its own under the model figures (routed requests by served model from
 * /v1/usage/routing, tool calls by MCP server and tool from /v1/usage/tools): its groups and
 * totals, or why there are none.
 */
/** @typedef {{ totals: Obj, groups: Obj[] } | { error: string }} SideReport */
/**
 * @typedef {object} SidePanel
 * @property {HTMLTableElement} table
 * @property {HTMLElement} empty the note shown when the table has no rows
 * @property {(g: Obj) => unknown[]} names the row's name cells
 * @property {string} report what its error note calls the report
 * @property {string} none what the note says when no row matches
 */
/**
 * @typedef {object} Filters
 * @property {string[]} tags
 * @property {Date} from
 * @property {Date} to
 * @property {'hour' | 'day'} granularity
 * @property {string} groupBy model, provider, endpoint or a tag key
 */
/** @typedef {{ path: string, label: string, format: Format, missing: 'zero' | 'gap' }} Metric */

const KEY_STORAGE = 'gateway.apiKey';
/** The default range: the last day by hour, so what a user just sent is a visible part of the chart. */
const DEFAULT_RANGE_MS = 24 * 3600 * 1000;
/** What the endpoint names of the reports mean (proxy/endpoints/endpoints.ts). */
const ENDPOINT_LABELS = /** @type {Record<string, string>} */ ({
  chat: 'Chat completions',
  completions: 'Completions',
  embeddings: 'Embeddings',
  responses: 'Responses',
  messages: 'Anthropic Messages',
  '': '(not recorded)',
});
const TAG_KEY = /^[A-Za-z0-9_.-]{1,64}$/;
const MAX_SUGGESTIONS = 50;
// More lines than this are unreadable; the table still lists every group.
const MAX_LINES = 10;
const CHART_HEIGHT = 300;
// Distinguishable on white and for the common colour-vision deficiencies (Okabe-Ito, then Tableau).
const PALETTE = [
  '#0072b2',
  '#e69f00',
  '#009e73',
  '#cc79a7',
  '#56b4e9',
  '#d55e00',
  '#7f7f7f',
  '#bcbd22',
  '#8c564b',
  '#17becf',
];

const page = document.body.dataset.page === 'analytics' ? 'analytics' : 'usage';
const endpoint = page === 'analytics' ? '/v1/analytics' : '/v1/usage';

/**
 * @template {HTMLElement} T
 * @param {string} id
 * @param {new () => T} type
 * @returns {T}
 */
function el(id, type) {
  const found = document.getElementById(id);
  if (!(found instanceof type)) throw new Error(`page is missing #${id}`);
  return found;
}

const form = el('filters', HTMLFormElement);
const apiKeyInput = el('api-key', HTMLInputElement);
const keyEntry = el('key-entry', HTMLSpanElement);
const signedInLabel = el('signed-in', HTMLSpanElement);
const signInLink = el('sign-in', HTMLAnchorElement);
const signOutButton = el('sign-out', HTMLButtonElement);
/** Whether the pages' sign-in session reads the data (then no key is sent; the cookie is). */
let signedIn = false;
const tagInput = el('tag-filter', HTMLInputElement);
const suggestions = el('tag-suggestions', HTMLDataListElement);
const fromInput = el('from', HTMLInputElement);
const toInput = el('to', HTMLInputElement);
const granularitySelect = el('granularity', HTMLSelectElement);
const groupBySelect = el('group-by', HTMLSelectElement);
const tagKeyField = el('tag-key-field', HTMLElement);
const tagKeyInput = el('tag-key', HTMLInputElement);
const applyButton = el('apply', HTMLButtonElement);
const errorBox = el('error', HTMLElement);
const chartBox = el('chart', HTMLElement);
const chartNote = el('chart-note', HTMLElement);
const table = el('group-table', HTMLTableElement);
const tableEmpty = el('table-empty', HTMLElement);
const groupLabel = el('group-label', HTMLElement);
const groupHead = el('group-head', HTMLElement);
/** @type {SidePanel} */
const toolsPanel = {
  table: el('tool-table', HTMLTableElement),
  empty: el('tools-empty', HTMLElement),
  names: (g) => [g.server, g.tool],
  report: 'tool report',
  none: 'No tool calls through /mcp match these filters in this range.',
};
/** @type {SidePanel} */
const routingPanel = {
  table: el('routing-table', HTMLTableElement),
  empty: el('routing-empty', HTMLElement),
  names: (g) => [g.group],
  report: 'routing report',
  none: 'No requests routed by a RoutingPolicy match these filters in this range.',
};
const guardrailTable = el('guardrail-table', HTMLTableElement);
const guardrailEmpty = el('guardrails-empty', HTMLElement);
const guardrailGroup = el('guardrail-group', HTMLElement);
const auditTable = el('audit-table', HTMLTableElement);
const auditEmpty = el('audit-empty', HTMLElement);
const auditExport = el('audit-export', HTMLButtonElement);
// Only the Usage page has the in-cluster deployments' GPU time table.
const deploymentTable = document.getElementById('deployment-table');
const deploymentsEmpty = document.getElementById('deployments-empty');

// ---- formatting -------------------------------------------------------------------------------

const intFmt = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
const usdFmt = new Intl.NumberFormat(undefined, {
  style: 'currency',
  currency: 'USD',
  minimumFractionDigits: 4,
  maximumFractionDigits: 4,
});
const pctFmt = new Intl.NumberFormat(undefined, {
  style: 'percent',
  minimumFractionDigits: 2,
  maximumFractionDigits: 2,
});
const hoursFmt = new Intl.NumberFormat(undefined, { minimumFractionDigits: 2, maximumFractionDigits: 2 });
const sizeFmt = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });
const SIZE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

/** @param {unknown} f @returns {Format} */
function asFormat(f) {
  return f === 'usd' || f === 'percent' || f === 'ms' || f === 'hours' || f === 'bytes' ? f : 'int';
}

/** A size in bytes, in the largest binary unit that keeps it at 1 or more (1536 -> 1.5 KiB). @param {number} v */
function bytes(v) {
  let unit = 0;
  let n = v;
  while (Math.abs(n) >= 1024 && unit < SIZE_UNITS.length - 1) {
    n /= 1024;
    unit++;
  }
  return `${unit === 0 ? intFmt.format(n) : sizeFmt.format(n)} ${SIZE_UNITS[unit]}`;
}

/**
 * @param {number | null | undefined} v
 * @param {Format} format
 */
function fmt(v, format) {
  if (v == null || !Number.isFinite(v)) return '–';
  switch (format) {
    case 'usd':
      return usdFmt.format(v);
    case 'percent':
      return pctFmt.format(v);
    case 'ms':
      return `${intFmt.format(Math.round(v))} ms`;
    case 'hours':
      return `${hoursFmt.format(v / 3600)} h`;
    case 'bytes':
      return bytes(v);
    default:
      return intFmt.format(v);
  }
}

/**
 * The number at a dotted path (`latencyMs.p95`), or null when absent or not a number.
 * @param {unknown} obj
 * @param {string} path
 * @returns {number | null}
 */
function pick(obj, path) {
  /** @type {unknown} */
  let cur = obj;
  for (const part of path.split('.')) {
    if (typeof cur !== 'object' || cur === null) return null;
    cur = /** @type {Obj} */ (cur)[part];
  }
  return typeof cur === 'number' && Number.isFinite(cur) ? cur : null;
}

/**
 * @param {unknown} group
 * @param {string} groupBy
 */
function groupName(group, groupBy) {
  if (groupBy === 'endpoint' && typeof group === 'string') return ENDPOINT_LABELS[group] ?? group;
  return typeof group === 'string' && group !== '' ? group : '(none)';
}

/** @param {Date} d a value for <input type="datetime-local">, in local time */
function toLocalInput(d) {
  const p = (/** @type {number} */ n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
}

// ---- errors -----------------------------------------------------------------------------------

/** @param {string} message */
function showError(message) {
  errorBox.textContent = message;
  errorBox.hidden = false;
}

function clearError() {
  errorBox.textContent = '';
  errorBox.hidden = true;
}

/** @param {unknown} err */
function messageOf(err) {
  return err instanceof Error ? err.message : String(err);
}

// ---- filters <-> form <-> query string ----------------------------------------------------------

/** @returns {Filters} @throws {Error} with a message for the user */
function readFilters() {
  const tags = tagInput.value.split(/[\s,]+/).filter((t) => t !== '');
  for (const t of tags) {
    const colon = t.indexOf(':');
    if (colon < 1 || colon === t.length - 1) throw new Error(`Tag "${t}" is not of the form key:value.`);
  }
  const from = new Date(fromInput.value);
  const to = new Date(toInput.value);
  if (Number.isNaN(from.getTime()) || Number.isNaN(to.getTime())) throw new Error('Enter both a From and a To date.');
  if (from >= to) throw new Error('From must be before To.');
  const granularity = granularitySelect.value === 'day' ? 'day' : 'hour';
  let groupBy = groupBySelect.value;
  if (groupBy === 'tag') {
    groupBy = tagKeyInput.value.trim();
    if (!TAG_KEY.test(groupBy)) {
      throw new Error("Enter the tag key to group by: 1-64 letters, digits, '_', '.' or '-' (e.g. team).");
    }
  }
  return { tags, from, to, granularity, groupBy };
}

/** The data API's query; the page URL carries the same one, so a view can be shared or bookmarked. */
/** @param {Filters} f */
function toParams(f) {
  const q = new URLSearchParams({
    from: f.from.toISOString(),
    to: f.to.toISOString(),
    granularity: f.granularity,
    groupBy: f.groupBy,
  });
  for (const t of f.tags) q.append('tag', t);
  return q;
}

/**
 * A side report's query: the same window and tags; its own grouping (the routing report: by
 * served model), or its default (the tool report: a group per server and tool).
 * @param {Filters} f
 * @param {string} [groupBy]
 */
function sideParams(f, groupBy) {
  const q = new URLSearchParams({ from: f.from.toISOString(), to: f.to.toISOString(), granularity: f.granularity });
  if (groupBy) q.set('groupBy', groupBy);
  for (const t of f.tags) q.append('tag', t);
  return q;
}

/** Fills the form from the page URL, or with the defaults (the last 24 hours, hourly, by model). */
function initForm() {
  const q = new URLSearchParams(location.search);
  const now = new Date();
  const to = new Date(q.get('to') ?? '');
  const from = new Date(q.get('from') ?? '');
  const toDate = Number.isNaN(to.getTime()) ? now : to;
  fromInput.value = toLocalInput(Number.isNaN(from.getTime()) ? new Date(toDate.getTime() - DEFAULT_RANGE_MS) : from);
  // datetime-local has minute precision: round "now" up so the newest requests are inside the range.
  toInput.value = toLocalInput(Number.isNaN(to.getTime()) ? new Date(now.getTime() + 60_000) : to);
  granularitySelect.value = q.get('granularity') === 'day' ? 'day' : 'hour';
  const groupBy = q.get('groupBy') ?? 'model';
  if (groupBy === 'model' || groupBy === 'provider' || groupBy === 'endpoint') {
    groupBySelect.value = groupBy;
  } else {
    groupBySelect.value = 'tag';
    tagKeyInput.value = groupBy;
  }
  tagInput.value = q.getAll('tag').join(' ');
  apiKeyInput.value = sessionStorage.getItem(KEY_STORAGE) ?? '';
  syncTagKeyField();
}

function syncTagKeyField() {
  tagKeyField.hidden = groupBySelect.value !== 'tag';
}

/** Keeps the filters when switching between Usage and Analytics. @param {URLSearchParams} q */
function updateNav(q) {
  for (const a of document.querySelectorAll('nav a[data-nav]')) {
    if (a instanceof HTMLAnchorElement) a.href = `/ui/${a.dataset.nav}?${q}`;
  }
}

// ---- API --------------------------------------------------------------------------------------

/**
 * GET a data API on this origin with the user's key. Errors carry the API's own message
 * ({"error": {"message"}}) when it sent one.
 * @param {string} path
 * @param {URLSearchParams} query
 * @param {AbortSignal} signal
 * @returns {Promise<unknown>}
 */
async function api(path, query, signal) {
  const key = apiKeyInput.value.trim();
  if (key === '' && !signedIn) throw new Error('Enter an API key first, or sign in.');
  /** @type {Response} */
  let res;
  try {
    res = await fetch(`${path}?${query}`, {
      headers:
        key === '' ? { accept: 'application/json' } : { authorization: `Bearer ${key}`, accept: 'application/json' },
      signal,
      cache: 'no-store',
    });
  } catch (err) {
    if (signal.aborted) throw err;
    throw new Error(`Could not reach the gateway: ${messageOf(err)}`);
  }
  /** @type {unknown} */
  let body;
  try {
    body = await res.json();
  } catch {
    body = undefined;
  }
  if (!res.ok) {
    const message = errorMessage(body) ?? (res.statusText || 'no error message');
    throw new Error(`${path} failed (HTTP ${res.status}): ${message}`);
  }
  return body;
}

/** @param {unknown} body @returns {string | null} */
function errorMessage(body) {
  if (typeof body !== 'object' || body === null) return null;
  const error = /** @type {Obj} */ (body).error;
  if (typeof error !== 'object' || error === null) return null;
  const message = /** @type {Obj} */ (error).message;
  return typeof message === 'string' && message !== '' ? message : null;
}

/** @param {unknown} x @returns {x is Obj} */
function isObj(x) {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

/** @param {unknown} body @returns {Report} */
function asReport(body) {
  if (!isObj(body) || !isObj(body.totals) || !Array.isArray(body.series) || !Array.isArray(body.groups)) {
    throw new Error(`${endpoint} answered with an unexpected shape (no totals, series or groups).`);
  }
  // An API of before GPU time has no deployments: an empty table, not an error.
  const deployments = Array.isArray(body.deployments) ? body.deployments.filter(isObj) : [];
  return { totals: body.totals, series: body.series.filter(isObj), groups: body.groups.filter(isObj), deployments };
}

/** @param {string} path @param {unknown} body @returns {SideReport} */
function asSideReport(path, body) {
  if (!isObj(body) || !isObj(body.totals) || !Array.isArray(body.groups)) {
    return { error: `${path} answered with an unexpected shape (no totals or groups).` };
  }
  return { totals: body.totals, groups: body.groups.filter(isObj) };
}

/**
 * A side report, whose failure is its own table's, not the page's (a gateway without it still
 * shows the model figures).
 * @param {string} path
 * @param {URLSearchParams} query
 * @param {AbortSignal} signal
 * @returns {Promise<SideReport>}
 */
function sideReport(path, query, signal) {
  return api(path, query, signal).then(
    (body) => asSideReport(path, body),
    (err) => {
      if (signal.aborted) throw err;
      return { error: messageOf(err) };
    },
  );
}

// ---- rendering ----------------------------------------------------------------------------------

/** @type {{ report: Report, filters: Filters, routing: SideReport, tools: SideReport } | null} */
let current = null;
/** @type {uPlot | null} */
let plot = null;

/** @param {Report | null} report */
function renderTotals(report) {
  for (const dd of document.querySelectorAll('.totals [data-field]')) {
    if (!(dd instanceof HTMLElement)) continue;
    const v = report ? pick(report.totals, dd.dataset.field ?? '') : null;
    dd.textContent = fmt(v, asFormat(dd.dataset.format));
  }
}

/** @param {Filters} filters */
function groupTitle(filters) {
  if (filters.groupBy === 'model') return 'Model';
  if (filters.groupBy === 'provider') return 'Provider';
  if (filters.groupBy === 'endpoint') return 'Endpoint';
  return `Tag ${filters.groupBy}`;
}

/**
 * @param {Report | null} report
 * @param {Filters | null} filters
 */
function renderTable(report, filters) {
  const columns = [...table.querySelectorAll('thead th[data-field]')].filter((th) => th instanceof HTMLElement);
  const title = filters ? groupTitle(filters) : 'Model';
  groupHead.textContent = title;
  groupLabel.textContent = title.toLowerCase();

  /**
   * @param {string} label
   * @param {Obj} values
   * @param {boolean} isTotal
   */
  const row = (label, values, isTotal) => {
    const tr = document.createElement('tr');
    const th = document.createElement('th');
    th.scope = 'row';
    th.textContent = label;
    if (isTotal) th.className = 'total';
    tr.append(th);
    for (const col of columns) {
      const td = document.createElement('td');
      td.className = 'num';
      td.textContent = fmt(pick(values, col.dataset.field ?? ''), asFormat(col.dataset.format));
      tr.append(td);
    }
    return tr;
  };

  const body = table.tBodies[0];
  const foot = table.tFoot;
  if (!body || !foot) return;
  body.replaceChildren(...(report?.groups ?? []).map((g) => row(groupName(g.group, filters?.groupBy ?? ''), g, false)));
  foot.replaceChildren(...(report && report.groups.length > 0 ? [row('Total', report.totals, true)] : []));
  if (!report) {
    tableEmpty.textContent = errorBox.hidden ? 'Enter an API key and press Apply.' : 'No data: see the error above.';
    tableEmpty.hidden = false;
  } else {
    tableEmpty.textContent = 'No requests match these filters in this range.';
    tableEmpty.hidden = report.groups.length > 0;
  }
}

/**
 * The in-cluster deployments' GPU time, on the page that has the table.
 * @param {Report | null} report
 */
function renderDeployments(report) {
  if (!(deploymentTable instanceof HTMLTableElement) || !deploymentsEmpty) return;
  const columns = [...deploymentTable.querySelectorAll('thead th[data-field]')].filter(
    (th) => th instanceof HTMLElement,
  );
  const rows = (report?.deployments ?? []).map((d) => {
    const tr = document.createElement('tr');
    for (const name of [d.deployment, d.model]) {
      const td = document.createElement('td');
      // A deployment's namespace/name and model come from resources, but still as text, never HTML.
      td.textContent = typeof name === 'string' ? name : '–';
      tr.append(td);
    }
    for (const col of columns) {
      const td = document.createElement('td');
      td.className = 'num';
      td.textContent = fmt(pick(d, col.dataset.field ?? ''), asFormat(col.dataset.format));
      tr.append(td);
    }
    return tr;
  });
  deploymentTable.tBodies[0]?.replaceChildren(...rows);
  deploymentsEmpty.hidden = rows.length > 0;
}

/**
 * A side table (routed requests by served model, tool calls by server and tool). Its own note
 * says why it is empty (nothing matches, no data, or its API's error).
 * @param {SidePanel} panel
 * @param {SideReport | null} side
 */
function renderSide(panel, side) {
  const columns = [...panel.table.querySelectorAll('thead th[data-field]')].filter((th) => th instanceof HTMLElement);
  /**
   * @param {string[]} names
   * @param {Obj} values
   * @param {boolean} isTotal
   */
  const row = (names, values, isTotal) => {
    const tr = document.createElement('tr');
    for (const [i, name] of names.entries()) {
      // Model, server and tool names come from callers and servers: text, never HTML.
      const cell = document.createElement(i === 0 ? 'th' : 'td');
      if (cell instanceof HTMLTableCellElement && i === 0) cell.scope = 'row';
      if (isTotal) cell.className = 'total';
      cell.textContent = name;
      tr.append(cell);
    }
    for (const col of columns) {
      const td = document.createElement('td');
      td.className = 'num';
      td.textContent = fmt(pick(values, col.dataset.field ?? ''), asFormat(col.dataset.format));
      tr.append(td);
    }
    return tr;
  };
  const name = (/** @type {unknown} */ v) => (typeof v === 'string' && v !== '' ? v : '(none)');
  const report = side && 'groups' in side ? side : null;
  const groups = report?.groups ?? [];
  const totalNames = panel.names({}).map((_, i) => (i === 0 ? 'Total' : ''));
  panel.table.tBodies[0]?.replaceChildren(...groups.map((g) => row(panel.names(g).map(name), g, false)));
  panel.table.tFoot?.replaceChildren(...(report && groups.length > 1 ? [row(totalNames, report.totals, true)] : []));
  if (!side) {
    panel.empty.textContent = errorBox.hidden ? 'Enter an API key and press Apply.' : 'No data: see the error above.';
  } else if ('error' in side) {
    panel.empty.textContent = `No ${panel.report}: ${side.error}`;
  } else {
    panel.empty.textContent = panel.none;
  }
  panel.empty.hidden = groups.length > 0;
}

/** @returns {Metric} */
function selectedMetric() {
  const radio = document.querySelector('input[name="metric"]:checked');
  const d = radio instanceof HTMLInputElement ? radio.dataset : {};
  return {
    path: radio instanceof HTMLInputElement ? radio.value : 'requests',
    label: d.label ?? 'Requests',
    format: asFormat(d.format),
    missing: d.missing === 'gap' ? 'gap' : 'zero',
  };
}

/**
 * Times (unix seconds) to plot. When every bucket the API sent sits on the UTC hour/day grid,
 * the whole grid of the range is used, so buckets with no requests show as zero instead of a line
 * drawn across them; otherwise (an API that buckets differently) just the times it sent.
 * @param {Report} report
 * @param {Filters} filters
 */
function timeAxis(report, filters) {
  const step = filters.granularity === 'day' ? 86_400 : 3_600;
  const seen = new Set();
  for (const s of report.series) {
    const t = Date.parse(String(s.time)) / 1000;
    if (Number.isFinite(t)) seen.add(t);
  }
  const start = Math.floor(filters.from.getTime() / 1000 / step) * step;
  const end = filters.to.getTime() / 1000;
  const onGrid = [...seen].every((t) => t % step === 0);
  if (onGrid && (end - start) / step <= 5_000) {
    for (let t = start; t < end; t += step) seen.add(t);
  }
  return [...seen].sort((a, b) => a - b);
}

function destroyPlot() {
  plot?.destroy();
  plot = null;
}

function renderChart() {
  destroyPlot();
  chartNote.hidden = true;
  if (!current) return;
  const { report, filters } = current;
  const metric = selectedMetric();
  chartBox.setAttribute('aria-label', `${metric.label} over time, one line per ${groupTitle(filters).toLowerCase()}`);
  const groups = report.groups.map((g) => groupName(g.group, filters.groupBy)).slice(0, MAX_LINES);
  if (groups.length === 0 || report.series.length === 0) {
    chartNote.textContent = 'No requests match these filters in this range.';
    chartNote.hidden = false;
    return;
  }
  const times = timeAxis(report, filters);
  const index = new Map(times.map((t, i) => [t, i]));
  const fill = metric.missing === 'zero' ? 0 : null;
  /** @type {(number | null)[][]} */
  const lines = groups.map(() => times.map(() => fill));
  const lineOf = new Map(groups.map((g, i) => [g, i]));
  for (const s of report.series) {
    const line = lineOf.get(groupName(s.group, filters.groupBy));
    const at = index.get(Date.parse(String(s.time)) / 1000);
    if (line === undefined || at === undefined) continue;
    const row = lines[line];
    if (row) row[at] = pick(s, metric.path) ?? fill;
  }
  if (report.groups.length > MAX_LINES) {
    chartNote.textContent = `Showing ${MAX_LINES} of ${report.groups.length} groups; the table lists all.`;
    chartNote.hidden = false;
  }

  /** @type {uPlot.Options} */
  const opts = {
    width: Math.max(chartBox.clientWidth, 280),
    height: CHART_HEIGHT,
    scales: { x: { time: true } },
    series: [
      {},
      ...groups.map((g, i) => ({
        label: g,
        stroke: PALETTE[i % PALETTE.length],
        width: 2,
        spanGaps: false,
        // A value between two gaps draws no line: mark it with a dot, or it would be invisible.
        points: {
          filter: (/** @type {uPlot} */ u, /** @type {number} */ si, /** @type {boolean} */ show) =>
            show ? null : isolated(u.data[si]),
        },
        value: (/** @type {uPlot} */ _u, /** @type {number | null} */ v) => fmt(v, metric.format),
      })),
    ],
    axes: [
      { stroke: '#5b6472', grid: { stroke: '#eef0f3' } },
      {
        label: metric.label,
        stroke: '#5b6472',
        grid: { stroke: '#eef0f3' },
        size: 80,
        values: (_u, splits) => splits.map((v) => axisValue(v, metric.format)),
      },
    ],
    legend: { live: true },
  };
  plot = new uPlot(opts, [times, ...lines], chartBox);
}

/**
 * Indices of values with no value on either side.
 * @param {ArrayLike<number | null | undefined> | undefined} ys
 * @returns {number[]}
 */
function isolated(ys) {
  /** @type {number[]} */
  const out = [];
  if (!ys) return out;
  for (let i = 0; i < ys.length; i++) {
    if (ys[i] != null && ys[i - 1] == null && ys[i + 1] == null) out.push(i);
  }
  return out;
}

/**
 * Shorter than the table's format: axis ticks need no four decimals when the range is in dollars.
 * @param {number} v
 * @param {Format} format
 */
function axisValue(v, format) {
  if (format === 'usd') return `$${v >= 1 ? v.toFixed(2) : Number(v.toPrecision(2))}`;
  if (format === 'ms') return `${intFmt.format(v)} ms`;
  if (format === 'percent') return pctFmt.format(v);
  if (format === 'hours') return `${hoursFmt.format(v / 3600)} h`;
  if (format === 'bytes') return bytes(v);
  return intFmt.format(v);
}

new ResizeObserver(() => {
  if (plot) plot.setSize({ width: Math.max(chartBox.clientWidth, 280), height: CHART_HEIGHT });
}).observe(chartBox);

// ---- loading ------------------------------------------------------------------------------------

/** @type {AbortController | null} */
let loading = null;

async function load() {
  loading?.abort();
  const controller = new AbortController();
  loading = controller;
  /** @type {Filters} */
  let filters;
  try {
    filters = readFilters();
  } catch (err) {
    showError(messageOf(err));
    return;
  }
  const query = toParams(filters);
  history.replaceState(null, '', `?${query}`);
  updateNav(query);
  applyButton.disabled = true;
  document.body.setAttribute('aria-busy', 'true');
  try {
    const [body, routing, tools] = await Promise.all([
      api(endpoint, query, controller.signal),
      sideReport('/v1/usage/routing', sideParams(filters, 'model'), controller.signal),
      sideReport('/v1/usage/tools', sideParams(filters), controller.signal),
      loadGuardrails(filters, controller.signal),
      loadAudit(filters, controller.signal),
    ]);
    const report = asReport(body);
    clearError();
    current = { report, filters, routing, tools };
  } catch (err) {
    if (controller.signal.aborted) return;
    showError(messageOf(err));
    // Numbers from earlier filters next to an error would read as the answer to these.
    current = null;
  } finally {
    if (loading === controller) {
      applyButton.disabled = false;
      document.body.removeAttribute('aria-busy');
    }
  }
  renderTotals(current?.report ?? null);
  renderTable(current?.report ?? null, current?.filters ?? null);
  renderDeployments(current?.report ?? null);
  renderSide(routingPanel, current?.routing ?? null);
  renderSide(toolsPanel, current?.tools ?? null);
  renderChart();
}

// ---- guardrails ---------------------------------------------------------------------------------

/** By the tag key the report is grouped by, else by team. @param {Filters} f */
const guardrailGroupBy = (f) =>
  f.groupBy === 'model' || f.groupBy === 'provider' || f.groupBy === 'endpoint' ? 'team' : f.groupBy;

/** @param {unknown} body @param {string | null} error @param {string} groupBy */
function renderGuardrails(body, error, groupBy) {
  guardrailGroup.textContent = groupBy === 'team' ? 'Team' : groupBy;
  const rows = isObj(body) && Array.isArray(body.data) ? body.data.filter(isObj) : [];
  guardrailTable.tBodies[0]?.replaceChildren(
    ...rows.map((r) => {
      const tr = document.createElement('tr');
      // Guardrail, category and group names come from resources and callers: text, never HTML.
      for (const [i, v] of [
        r.group || '(none)',
        r.guardrail,
        r.category,
        r.action,
        r.where,
        r.requests,
        r.findings,
      ].entries()) {
        const td = document.createElement(i === 0 ? 'th' : 'td');
        if (i >= 5) td.className = 'num';
        td.textContent = typeof v === 'number' ? fmt(v, 'int') : String(v ?? '');
        tr.append(td);
      }
      return tr;
    }),
  );
  guardrailEmpty.hidden = rows.length > 0;
  guardrailEmpty.textContent = error ?? 'No guardrail findings match these filters in this range.';
}

/** @param {Filters} filters @param {AbortSignal} signal */
function loadGuardrails(filters, signal) {
  const groupBy = guardrailGroupBy(filters);
  const q = new URLSearchParams({ from: filters.from.toISOString(), to: filters.to.toISOString(), groupBy });
  for (const t of filters.tags) q.append('tag', t);
  return api('/v1/usage/guardrails', q, signal).then(
    (body) => renderGuardrails(body, null, groupBy),
    (err) => {
      if (!signal.aborted) renderGuardrails(null, messageOf(err), groupBy);
    },
  );
}

// ---- audit trail --------------------------------------------------------------------------------

const AUDIT_ROWS = 50;

/** @param {Filters} f @param {number} [limit] */
function auditParams(f, limit) {
  const q = new URLSearchParams({ since: f.from.toISOString(), until: f.to.toISOString() });
  if (limit) q.set('limit', String(limit));
  return q;
}

/** @param {unknown} r @returns {string[]} */
function auditCells(r) {
  if (!isObj(r)) return [];
  const actor = isObj(r.actor) ? r.actor : {};
  const target = isObj(r.target) ? r.target : {};
  const who =
    typeof actor.name === 'string' && actor.name !== '' ? `${actor.name} (${actor.kind})` : String(actor.kind ?? '');
  const object = [target.kind, target.namespace, target.name]
    .filter((v) => typeof v === 'string' && v !== '')
    .join(' ');
  const changed = Array.isArray(r.changed) ? r.changed.join(', ') : '';
  const action =
    typeof r.reason === 'string'
      ? `${r.action} (${r.reason}${typeof r.count === 'number' ? ` ×${r.count}` : ''})`
      : String(r.action ?? '');
  const when = typeof r.at === 'string' ? new Date(r.at).toLocaleString() : '';
  return [when, who, action, object, changed, typeof r.from === 'string' ? r.from : ''];
}

/** @param {unknown} body @param {string | null} error */
function renderAudit(body, error) {
  const tbody = auditTable.tBodies[0];
  tbody?.replaceChildren();
  const records = isObj(body) && Array.isArray(body.data) ? body.data : [];
  for (const r of records) {
    const tr = document.createElement('tr');
    // Names come from Kubernetes users and callers: text, never HTML.
    for (const text of auditCells(r)) {
      const td = document.createElement('td');
      td.textContent = text;
      tr.append(td);
    }
    tbody?.append(tr);
  }
  auditEmpty.hidden = records.length > 0;
  auditEmpty.textContent = error ?? 'No audit records in this range.';
}

/** @param {Filters} filters @param {AbortSignal} signal */
function loadAudit(filters, signal) {
  return api('/v1/audit', auditParams(filters, AUDIT_ROWS), signal).then(
    (body) => renderAudit(body, null),
    (err) => {
      if (!signal.aborted) renderAudit(null, messageOf(err));
    },
  );
}

/** Every record of the range as NDJSON, downloaded (fetched with the key or session, then saved). */
async function exportAudit() {
  try {
    const key = apiKeyInput.value.trim();
    const res = await fetch(`/v1/audit?${auditParams(readFilters())}&format=ndjson`, {
      headers: key === '' ? {} : { authorization: `Bearer ${key}` },
      cache: 'no-store',
    });
    if (!res.ok)
      throw new Error(
        `/v1/audit failed (HTTP ${res.status}): ${errorMessage(await res.json().catch(() => null)) ?? res.statusText}`,
      );
    const link = document.createElement('a');
    link.href = URL.createObjectURL(await res.blob());
    link.download = 'audit.ndjson';
    link.click();
    // Some browsers start the download after click() returns: the URL lives a while.
    setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
  } catch (err) {
    showError(messageOf(err));
  }
}
auditExport.addEventListener('click', () => void exportAudit());

// ---- tag suggestions ----------------------------------------------------------------------------

/** @type {ReturnType<typeof setTimeout> | undefined} */
let suggestTimer;
/** @type {AbortController | null} */
let suggesting = null;
let lastPrefix = /** @type {string | null} */ (null);

async function suggest() {
  const value = tagInput.value;
  const prefix = /[^\s,]*$/.exec(value)?.[0] ?? '';
  if (prefix === lastPrefix || (apiKeyInput.value.trim() === '' && !signedIn)) return;
  lastPrefix = prefix;
  const head = value.slice(0, value.length - prefix.length);
  suggesting?.abort();
  const controller = new AbortController();
  suggesting = controller;
  try {
    const body = await api('/v1/tags', new URLSearchParams({ search: prefix }), controller.signal);
    const data = isObj(body) && Array.isArray(body.data) ? body.data.filter(isObj) : [];
    const options = data.slice(0, MAX_SUGGESTIONS).map((t) => {
      const option = document.createElement('option');
      // The whole field with the word being typed completed, so picking one keeps the other tags.
      option.value = `${head}${String(t.key)}:${String(t.value)}`;
      const requests = pick(t, 'requests');
      option.label =
        requests === null ? `${t.key}:${t.value}` : `${t.key}:${t.value} (${fmt(requests, 'int')} requests)`;
      return option;
    });
    suggestions.replaceChildren(...options);
  } catch {
    // Suggestions are a convenience: a wrong key or an outage is reported by Apply, not by typing.
    lastPrefix = null;
  }
}

/**
 * The sign-in session, if the gateway offers sign-in: signed in, the key field gives way to who is
 * signed in; not signed in, a Sign in link beside it.
 */
async function showSession() {
  /** @type {unknown} */
  let s;
  try {
    s = await (await fetch('/ui/session', { cache: 'no-store' })).json();
  } catch {
    return;
  }
  if (!isObj(s)) return;
  signedIn = s.signedIn === true;
  if (signedIn) {
    signedInLabel.textContent = `Signed in as ${String(s.user)} (${s.role === 'Admin' ? 'all teams' : `team ${String(s.team)}`})`;
    apiKeyInput.value = '';
    sessionStorage.removeItem(KEY_STORAGE);
  } else if (typeof s.signIn === 'string') {
    signInLink.href = `${s.signIn}?back=${encodeURIComponent(location.pathname)}`;
  }
  signedInLabel.hidden = !signedIn;
  signOutButton.hidden = !signedIn;
  keyEntry.hidden = signedIn;
  signInLink.hidden = signedIn || typeof s.signIn !== 'string';
}

// ---- wiring -------------------------------------------------------------------------------------

initForm();

form.addEventListener('submit', (e) => {
  e.preventDefault();
  void load();
});
groupBySelect.addEventListener('change', () => {
  syncTagKeyField();
  if (groupBySelect.value === 'tag') tagKeyInput.focus();
});
apiKeyInput.addEventListener('input', () => {
  const key = apiKeyInput.value.trim();
  if (key === '') sessionStorage.removeItem(KEY_STORAGE);
  else sessionStorage.setItem(KEY_STORAGE, key);
  lastPrefix = null;
});
apiKeyInput.addEventListener('keydown', (e) => {
  if (e.key === 'Enter') void load();
});
tagInput.addEventListener('input', () => {
  clearTimeout(suggestTimer);
  suggestTimer = setTimeout(() => void suggest(), 200);
});
tagInput.addEventListener('focus', () => void suggest());
for (const radio of document.querySelectorAll('input[name="metric"]')) {
  radio.addEventListener('change', renderChart);
}

signOutButton.addEventListener('click', () => {
  void fetch('/ui/sign-out', { method: 'POST' }).then(() => location.reload());
});

updateNav(new URLSearchParams(location.search));
void showSession().then(() => {
  if (signedIn || apiKeyInput.value !== '') void load();
});
