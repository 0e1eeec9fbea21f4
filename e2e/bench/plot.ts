import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Resvg } from '@resvg/resvg-js';
import { parse, View } from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import type { GatewaysResult } from './gateways.js';
import type { ScalingPoint, ScalingResult } from './proxy-scaling.js';

/**
 * The benchmarks' line charts as PNG files in e2e/bench/plots/ (committed; RESULTS.md links them). Each chart is a
 * Vega-Lite spec rendered headless to SVG by Vega (no canvas, no browser) and rasterized by resvg with the DejaVu
 * fonts of Debian's fonts-dejavu-core, so the same result renders the same picture on any machine with that package.
 * Run: npx tsx e2e/bench/plot.ts e2e/bench/out/results-<date>.json   (or one section's own JSON: a --json-out file
 *      of gateways.ts or proxy-scaling.ts, or e2e/bench/out/operator-scale.json)
 */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const PLOTS = join(ROOT, 'e2e', 'bench', 'plots');
const FONT_DIR = '/usr/share/fonts/truetype/dejavu';
/** Bold too: titles are bold, and resvg draws a missing weight with the regular face. */
const FONTS = ['DejaVuSans.ttf', 'DejaVuSans-Bold.ttf'].map((f) => join(FONT_DIR, f));
const FONT = 'DejaVu Sans';
/** Rendered at twice the spec's size: sharp on a high-density screen, still small files. */
const SCALE = 2;

const BLUE = '#1f77b4';
const ORANGE = '#ff7f0e';
const GREEN = '#2ca02c';
const PURPLE = '#9467bd';
const GREY = '#7f7f7f';

// ---------------------------------------------------------------------------------------------------------------
// Figures: what a chart shows, independent of how it is drawn.

export interface Series {
  name: string;
  points: Array<{ x: number; y: number }>;
  color: string;
  /**
   * line: a measurement (solid, markers); floor: a measured bound to compare with (dashed, markers); target: a
   * threshold (dashed, no markers); dots: single measurements around a line of medians (markers only).
   */
  style?: Style;
}

export interface Panel {
  title: string;
  x: { title: string; log?: boolean };
  y: { title: string };
  series: Series[];
}

export interface Figure {
  /** The PNG's name in plots/, without extension. */
  name: string;
  title: string;
  /** Short lines: Vega lays text out by an estimate of its width (0.8 em a character, no canvas) that runs long. */
  subtitle?: string[];
  columns: number;
  panels: Panel[];
}

export type Style = 'line' | 'floor' | 'target' | 'dots';

const finite = (p: { x: number; y: number }) => Number.isFinite(p.x) && Number.isFinite(p.y);

/** A horizontal line across the panel's x range: a target. */
function level(name: string, y: number, xs: number[], color = GREY): Series {
  return { name, color, style: 'target', points: [Math.min(...xs), Math.max(...xs)].map((x) => ({ x, y })) };
}

type Axis = 'models' | 'keys';
type Metric = 'rps' | 'p99Ms' | 'cpuUsPerReq';
const METRICS: Array<{ metric: Metric; what: string; unit: string }> = [
  { metric: 'rps', what: 'Throughput', unit: 'requests/s' },
  { metric: 'p99Ms', what: 'p99 latency', unit: 'p99 latency (ms)' },
  { metric: 'cpuUsPerReq', what: 'Proxy CPU per request', unit: 'proxy CPU (µs/request)' },
];
const AXES: Record<Axis, { noun: string; one: string }> = {
  models: { noun: 'routed models', one: 'model' },
  keys: { noun: 'API keys', one: 'key' },
};
const plural = (n: number, one: string) => `${n} ${one}${n === 1 ? '' : 's'}`;

function scalingPanel(points: ScalingPoint[], axis: Axis, m: (typeof METRICS)[number], keep: number): Panel {
  const other: Axis = axis === 'models' ? 'keys' : 'models';
  const lines = (value: number) => points.filter((p) => p[other] === value).length >= 2;
  const others = [...new Set(points.map((p) => p[other]))].filter(lines).sort((a, b) => a - b);
  const palette = [BLUE, ORANGE, GREEN, PURPLE];
  const series: Series[] = [];
  for (const [i, value] of others.entries()) {
    const line = points.filter((p) => p[other] === value).sort((a, b) => a[axis] - b[axis]);
    const color = palette[i % palette.length] ?? BLUE;
    // A grid run has one line per value of the other axis; the usual run only the one at 1.
    const label = others.length > 1 ? `median, ${plural(value, AXES[other].one)}` : 'median of rounds';
    series.push({ name: label, color, points: line.map((p) => ({ x: p[axis], y: p[m.metric] })).filter(finite) });
    if (value !== 1) continue;
    series.push({
      name: 'each round',
      color,
      style: 'dots',
      points: line.flatMap((p) => p.runs.map((r) => ({ x: p[axis], y: r[m.metric] }))).filter(finite),
    });
    const base = line[0];
    if (m.metric === 'rps' && base && base[axis] === 1) {
      series.push(
        level(
          `target: ${keep * 100}% of 1 ${AXES[axis].one}`,
          keep * base.rps,
          line.map((p) => p[axis]),
        ),
      );
    }
  }
  return {
    title: `${m.what} vs ${AXES[axis].noun}`,
    x: { title: `${AXES[axis].noun} (log scale)`, log: true },
    y: { title: m.unit },
    series,
  };
}

export function scalingFigure(result: ScalingResult): Figure {
  const s = result.settings;
  const panels: Panel[] = [];
  // Row by row: each measure vs models, then vs keys.
  for (const m of METRICS)
    for (const axis of ['models', 'keys'] as const) panels.push(scalingPanel(result.points, axis, m, 0.85));
  return {
    name: 'proxy-scaling',
    title: 'Proxy scaling: routed models and API keys',
    subtitle: [
      `proxy/main.ts standalone (auth, tags, usage in SQLite, metrics); autocannon c=${s.connections}, non-streaming;`,
      `${plural(s.rounds, 'round')} of ${s.durationS} s per point; requests rotate over every model and key of a point;`,
      `${result.machine.cores} cores, ${result.machine.date.slice(0, 10)}`,
    ],
    columns: 2,
    panels: panels.filter((p) => p.series.length > 0),
  };
}

/** The operator's time to Running against the control plane's floor (its objects applied directly), per size. */
export interface OperatorScalePlot {
  sizes: number[];
  floorSeconds: number[];
  oursSeconds: number[];
  date?: string;
}

export function operatorFigure(input: OperatorScalePlot): Figure {
  const at = (ys: number[]) => input.sizes.map((x, i) => ({ x, y: ys[i] ?? Number.NaN })).filter(finite);
  return {
    name: 'operator-scale',
    title: 'Operator: time until every ModelDeployment is Running',
    subtitle: [
      'local control plane + kwok GPU nodes;',
      'floor: the Deployments and Services the operator makes, applied directly',
      ...(input.date ? [input.date.slice(0, 10)] : []),
    ],
    columns: 1,
    panels: [
      {
        title: 'Time to Running vs ModelDeployments applied at once',
        x: { title: 'ModelDeployments applied at once (log scale)', log: true },
        y: { title: 'time until all Running (s)' },
        series: [
          { name: 'ours: ModelDeployments through the operator', color: BLUE, points: at(input.oursSeconds) },
          {
            name: 'floor: their objects applied directly',
            color: GREY,
            style: 'floor',
            points: at(input.floorSeconds),
          },
        ],
      },
    ],
  };
}

/** operator-scale.json as operator-scale.ts writes it: `results[]` of one size each; undefined if not that shape. */
export function operatorInput(json: unknown): OperatorScalePlot | undefined {
  const file = json as { date?: unknown; results?: unknown } | null;
  if (!file || !Array.isArray(file.results)) return undefined;
  const rows = (file.results as unknown[]).filter(
    (r): r is { modelDeployments: number; floorSeconds: number; oursSeconds: number } =>
      typeof r === 'object' &&
      r !== null &&
      typeof (r as { modelDeployments?: unknown }).modelDeployments === 'number' &&
      typeof (r as { floorSeconds?: unknown }).floorSeconds === 'number' &&
      typeof (r as { oursSeconds?: unknown }).oursSeconds === 'number',
  );
  if (rows.length === 0) return undefined;
  rows.sort((a, b) => a.modelDeployments - b.modelDeployments);
  return {
    sizes: rows.map((r) => r.modelDeployments),
    floorSeconds: rows.map((r) => r.floorSeconds),
    oursSeconds: rows.map((r) => r.oursSeconds),
    ...(typeof file.date === 'string' ? { date: file.date } : {}),
  };
}

type GatewayRow = GatewaysResult['rows'][number];

export function gatewaysFigure(result: GatewaysResult): Figure {
  const palette: Record<string, string> = { ours: BLUE, bare: ORANGE, 'ours-pg': PURPLE };
  // Ours against the floor of any Node proxy; the others (direct, Portkey, LiteLLM) sit far off that scale.
  const shown = (target: string) => target === 'bare' || target.startsWith('ours');
  const panel = (mode: 'json' | 'stream', y: 'rps' | 'cpuUsPerReq'): Panel => {
    // Chat completions: the figure compares releases, and rows from before dialects were measured have none.
    const rows = result.rows.filter(
      (r) => (r.dialect ?? 'chat') === 'chat' && r.mode === mode && shown(r.target) && r.bad === 0 && r.ok > 0,
    );
    const targets = [...new Set(rows.map((r) => r.target))].sort();
    const line = (t: string) =>
      rows
        .filter((r: GatewayRow) => r.target === t)
        .sort((a, b) => a.c - b.c)
        .map((r) => ({ x: r.c, y: r[y] }))
        .filter(finite);
    const series: Series[] = targets.map((t) => ({
      name: t === 'bare' ? 'bare Node proxy (floor)' : t,
      color: palette[t] ?? GREEN,
      points: line(t),
    }));
    if (y === 'rps') {
      const bare = line('bare');
      if (bare.length > 0)
        series.push({
          name: 'target: 85% of bare',
          color: GREY,
          style: 'target',
          points: bare.map((p) => ({ x: p.x, y: 0.85 * p.y })),
        });
    }
    const how = mode === 'json' ? 'non-streaming' : 'streaming';
    return {
      title: y === 'rps' ? `Throughput, ${how}` : `CPU per request, ${how}`,
      x: { title: 'concurrent connections (log scale)', log: true },
      y: { title: y === 'rps' ? 'requests/s' : 'gateway CPU (µs/request)' },
      series: series.filter((s) => s.points.length > 0),
    };
  };
  const s = result.settings;
  return {
    name: 'gateways',
    title: 'Gateway throughput: ours vs a bare Node proxy',
    subtitle: [
      `the same Ollama double (${result.upstream.completionTokens} tokens, no delays) behind each;`,
      `autocannon in its own process, ${s.durationS} s per point;`,
      `${result.machine.cores} cores, ${result.machine.date.slice(0, 10)}`,
    ],
    columns: 2,
    panels: [
      panel('json', 'rps'),
      panel('stream', 'rps'),
      panel('json', 'cpuUsPerReq'),
      panel('stream', 'cpuUsPerReq'),
    ].filter((p) => p.series.length > 0),
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Drawing

/** One chart of a concatenation, as vega-lite types it (its package exports only the top-level spec type). */
type ConcatSpec = Extract<TopLevelSpec, { concat: unknown[] }>;
type PanelSpec = ConcatSpec['concat'][number];
type LayerSpec = Extract<PanelSpec, { layer: unknown[] }>;
type Encoding = NonNullable<Extract<LayerSpec['layer'][number], { mark: unknown }>['encoding']>;

/** In the legend a dotted stroke stands for the markers-only series. */
const DASHES: Record<Style, number[]> = { line: [1, 0], floor: [6, 4], target: [6, 4], dots: [2, 3] };

function panelSpec(panel: Panel): PanelSpec {
  const names = panel.series.map((s) => s.name);
  const styleOf = (s: Series): Style => s.style ?? 'line';
  const values = panel.series.flatMap((s) =>
    s.points.map((p) => ({ series: s.name, x: p.x, y: p.y, style: styleOf(s) })),
  );
  const xs = [...new Set(values.map((v) => v.x))].sort((a, b) => a - b);
  // Color and dash both encode the series (same field, same domain), so vega-lite draws one legend showing both.
  const legend = {
    title: null,
    orient: 'bottom',
    direction: 'vertical',
    symbolType: 'stroke',
    // No limit: the limit is checked against the estimate, which cuts labels that would fit.
    labelLimit: 0,
  } as const;
  const encoding: Encoding = {
    x: {
      field: 'x',
      type: 'quantitative',
      title: panel.x.title,
      scale: panel.x.log ? { type: 'log', nice: false, padding: 12 } : { nice: false, padding: 12 },
      // Ticks at the measured points only: a log axis otherwise labels 2, 3, 20, 30... that nobody measured.
      axis: { values: xs, format: ',', grid: true },
    },
    y: { field: 'y', type: 'quantitative', title: panel.y.title, scale: { zero: true } },
    color: {
      field: 'series',
      type: 'nominal',
      scale: { domain: names, range: panel.series.map((s) => s.color) },
      legend,
    },
    strokeDash: {
      field: 'series',
      type: 'nominal',
      scale: { domain: names, range: panel.series.map((s) => DASHES[styleOf(s)]) },
      legend,
    },
  };
  const { strokeDash: _dash, ...markers } = encoding;
  const only = (...styles: Style[]) => [{ filter: { field: 'style', oneOf: styles } }];
  return {
    title: panel.title,
    width: 380,
    height: 230,
    data: { values },
    layer: [
      {
        transform: only('line', 'floor'),
        mark: { type: 'line', point: { filled: true, size: 45 }, strokeWidth: 2.5 },
        encoding,
      },
      { transform: only('target'), mark: { type: 'line', strokeWidth: 2 }, encoding },
      // No dash here: it would draw each marker's outline dotted.
      { transform: only('dots'), mark: { type: 'point', filled: true, size: 40, opacity: 0.45 }, encoding: markers },
    ],
  };
}

export function figureSpec(figure: Figure): TopLevelSpec {
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: {
      text: figure.title,
      ...(figure.subtitle ? { subtitle: figure.subtitle } : {}),
      anchor: 'start',
      offset: 16,
    },
    background: 'white',
    padding: 12,
    columns: figure.columns,
    concat: figure.panels.map(panelSpec),
    // Each panel its own scales and legend: throughput and milliseconds share nothing.
    resolve: { scale: { color: 'independent', strokeDash: 'independent', x: 'independent', y: 'independent' } },
    config: {
      font: FONT,
      title: { fontSize: 16, subtitleFontSize: 11, subtitleColor: '#555' },
      axis: { labelFontSize: 11, titleFontSize: 12, titleFontWeight: 'normal' },
      legend: { labelFontSize: 11, symbolStrokeWidth: 2.5, symbolSize: 300 },
      view: { stroke: '#ccc' },
      concat: { spacing: 28 },
    },
  };
}

function fontFiles(): string[] {
  const found = FONTS.filter((f) => existsSync(f));
  if (found.length === 0) {
    throw new Error(`no font at ${FONTS.join(', ')}: the plots need Debian's fonts-dejavu-core (apt-get install)`);
  }
  return found;
}

export async function renderPng(figure: Figure): Promise<Buffer> {
  const view = new View(parse(compile(figureSpec(figure)).spec), { renderer: 'none' });
  try {
    const svg = await view.toSVG(SCALE);
    const png = new Resvg(svg, {
      font: { loadSystemFonts: false, fontFiles: fontFiles(), defaultFontFamily: FONT, sansSerifFamily: FONT },
    })
      .render()
      .asPng();
    return Buffer.from(png);
  } finally {
    view.finalize();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// From results to files

/** What bench.ts collects per section: the section's structured result, where it has one. */
export interface PlotSources {
  gateways?: unknown;
  scaling?: unknown;
  operator?: unknown;
}

/** The figures these results hold; a section missing, failed or of an older shape gives none. */
export function figuresOf(sources: PlotSources): Figure[] {
  const figures: Figure[] = [];
  const gateways = sources.gateways as GatewaysResult | undefined;
  if (Array.isArray(gateways?.rows) && gateways.rows.length > 0) figures.push(gatewaysFigure(gateways));
  const scaling = sources.scaling as ScalingResult | undefined;
  if (Array.isArray(scaling?.points) && scaling.points.length > 0) figures.push(scalingFigure(scaling));
  const operator = operatorInput(sources.operator);
  if (operator) figures.push(operatorFigure(operator));
  return figures.filter((f) => f.panels.length > 0);
}

/** Writes plots/<name>.png for each figure; returns the paths written. */
export async function writePlots(sources: PlotSources, dir = PLOTS): Promise<string[]> {
  const written: string[] = [];
  mkdirSync(dir, { recursive: true });
  for (const figure of figuresOf(sources)) {
    const file = join(dir, `${figure.name}.png`);
    writeFileSync(file, await renderPng(figure));
    written.push(file);
  }
  return written;
}

/** A saved bench results file ({sections: {name: {result}}}), or one section's own JSON, recognized by its shape. */
export function sourcesOf(json: unknown): PlotSources {
  const o = (json ?? {}) as Record<string, unknown>;
  if (o.sections && typeof o.sections === 'object') {
    const sections = o.sections as Record<string, { result?: unknown } | undefined>;
    return {
      gateways: sections.gateways?.result,
      scaling: sections.scaling?.result,
      operator: sections.operator?.result,
    };
  }
  if (Array.isArray(o.rows)) return { gateways: o };
  if (Array.isArray(o.points)) return { scaling: o };
  return { operator: o };
}

async function main(): Promise<void> {
  const files = process.argv.slice(2);
  if (files.length === 0) {
    console.error('usage: npm run bench:plot -- e2e/bench/out/results-<date>.json [more.json...]');
    process.exit(2);
  }
  let written = 0;
  for (const file of files) {
    for (const path of await writePlots(sourcesOf(JSON.parse(readFileSync(file, 'utf8')) as unknown))) {
      console.log(`plot: ${path}`);
      written++;
    }
  }
  if (written === 0) {
    console.error(`nothing to plot in ${files.join(', ')}: no gateways, scaling or operator result in them`);
    process.exitCode = 1;
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await main();
