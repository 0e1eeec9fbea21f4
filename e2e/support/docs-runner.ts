import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { type Block, fillPlaceholders, option, ROOT, where } from './docs-blocks.js';

/**
 * Runs the docs' shell and TypeScript blocks (e2e/support/docs-blocks.ts) the way a reader
 * would, one file's blocks in order in one sandbox: bash with `set -eo pipefail`, the
 * repository as the working directory, a HOME of its own, and the environment a block exports
 * carried to the next. What the suites stand in for is said where it happens: the addresses
 * a reader's gateway would have (`http://127.0.0.1:8080`), and `kubectl port-forward` to a
 * Service whose pods no kubelet runs here.
 */

export interface Sandbox {
  /** The reader's HOME: `~/` in blocks and `file=~/...` land here. */
  home: string;
  env: Record<string, string>;
  /** Address in the docs -> where the suite's process listens (`http://127.0.0.1:8080` -> ...). */
  urls: Map<string, string>;
  /** Service name -> the local process standing in for its pods, for `kubectl port-forward`. */
  services: Map<string, string>;
}

export function sandbox(env: Record<string, string>, services: Record<string, string> = {}): Sandbox {
  const home = mkdtempSync(join(tmpdir(), 'pao-docs-home-'));
  return { home, env: { ...env, HOME: home }, urls: new Map(), services: new Map(Object.entries(services)) };
}

export const removeSandbox = (s: Sandbox) => rmSync(s.home, { recursive: true, force: true });

/** The environment of this process without what a reader's shell would not have (the suite's cluster). */
export function readerEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('VITEST')) env[k] = v;
  delete env.KUBECONFIG;
  return { ...env, ...extra };
}

export const expandHome = (s: Sandbox, path: string) => (path.startsWith('~/') ? join(s.home, path.slice(2)) : path);

/** A block's text as it runs: placeholders filled, the docs' addresses replaced by the suite's. */
export function prepared(s: Sandbox, text: string): string {
  let out = fillPlaceholders(text);
  for (const [from, to] of s.urls) out = out.replaceAll(from, to);
  return out;
}

/** `file=~/PATH`: the block written where the reader would save it. */
export function writeBlockFile(s: Sandbox, b: Block): string {
  const path = expandHome(s, option(b, 'file') ?? '');
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, prepared(s, b.text));
  return path;
}

const PORT_FORWARD = /^\s*kubectl\b(.*)\bport-forward\s+(?:svc|service)\/([a-z0-9-]+)\s+(\d+):(\d+)\s*&?\s*$/;

/**
 * `kubectl port-forward svc/NAME LOCAL:PORT` needs a pod a kubelet runs; here the Service's
 * stand-in is a local process, so the line is replaced by a note, and `localhost:LOCAL` in this
 * and later blocks is that process's address.
 */
function standInPortForwards(s: Sandbox, text: string): string {
  return text
    .split('\n')
    .map((line) => {
      const m = PORT_FORWARD.exec(line);
      if (!m) return line;
      const [, , service = '', local = ''] = m;
      const target = s.services.get(service);
      if (!target) throw new Error(`port-forward to svc/${service}: no local process stands in for it`);
      s.urls.set(`http://localhost:${local}`, target);
      s.urls.set(`http://127.0.0.1:${local}`, target);
      return `: port-forward svc/${service} stands in as ${target}`;
    })
    .join('\n');
}

export interface ShellRun {
  code: number | null;
  stdout: string;
  stderr: string;
  /** HTTP statuses of the block's curl calls, in order. */
  statuses: number[];
}

const STATUS_MARK = 'DOCS-HTTP-STATUS';
/** curl as the reader runs it, but telling the suite each call's HTTP status (on stderr, apart from the output). */
const CURL = `curl() { command curl --write-out '%{stderr}${STATUS_MARK} %{http_code}\\n' "$@"; }`;

/** Runs a shell block in bash; the variables it leaves are the next block's environment. */
export async function runShell(s: Sandbox, b: Block, timeoutMs: number): Promise<ShellRun> {
  const text = prepared(s, standInPortForwards(s, b.text));
  const state = join(s.home, '.docs-env');
  const script = ['set -eo pipefail', CURL, `trap 'env -0 > "${state}"' EXIT`, `cd ${JSON.stringify(ROOT)}`, text].join(
    '\n',
  );
  const child = spawn('bash', ['-c', script], { env: s.env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => {
    stdout += d.toString();
  });
  child.stderr.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  const code = await new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)));
  clearTimeout(timer);
  try {
    const vars = readFileSync(state, 'utf8').split('\0').filter(Boolean);
    const next: Record<string, string> = {};
    for (const v of vars) {
      const i = v.indexOf('=');
      const name = v.slice(0, i);
      if (!['_', 'SHLVL', 'PWD', 'OLDPWD'].includes(name)) next[name] = v.slice(i + 1);
    }
    s.env = next;
  } catch {
    // The shell died before its trap (killed at the timeout): the environment stays as it was.
  }
  const statuses = [...stderr.matchAll(new RegExp(`${STATUS_MARK} (\\d{3})`, 'g'))].map((m) => Number(m[1]));
  return { code, stdout, stderr: stderr.replace(new RegExp(`${STATUS_MARK} \\d{3}\\n`, 'g'), ''), statuses };
}

/** Why a shell run does not pass: a failing command, or a curl call answered other than the block expects. */
export function shellProblems(b: Block, run: ShellRun): string[] {
  const problems: string[] = [];
  if (run.code !== 0) problems.push(`exited ${run.code}`);
  const expected = option(b, 'status');
  for (const status of run.statuses) {
    if (expected ? String(status) !== expected : status >= 400) problems.push(`a curl call answered ${status}`);
  }
  return problems.length ? [`${where(b)}: ${problems.join('; ')}\n${run.stdout}\n${run.stderr}`.trim()] : [];
}

/** A TypeScript block run by tsx from inside the repository (so its imports resolve as the reader's would). */
export async function runTypeScript(s: Sandbox, b: Block, timeoutMs: number): Promise<ShellRun> {
  const dir = join(ROOT, '.e2e-artifacts', 'docs');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${b.file.replace(/[^A-Za-z0-9]+/g, '-')}-${b.line}.ts`);
  writeFileSync(file, prepared(s, b.text));
  const ts: Block = { ...b, text: `node --import tsx ${JSON.stringify(file)}\n` };
  return runShell(s, ts, timeoutMs);
}

/** Every JSON value printed one after another (curl calls print theirs without newlines). */
function jsonValues(text: string): unknown[] {
  const out: unknown[] = [];
  let depth = 0;
  let start = -1;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"' && depth > 0) inString = true;
    else if (c === '{' || c === '[') {
      if (depth === 0) start = i;
      depth++;
    } else if ((c === '}' || c === ']') && depth > 0) {
      depth--;
      if (depth === 0) {
        try {
          out.push(JSON.parse(text.slice(start, i + 1)));
        } catch {
          // not JSON: some other bracketed text
        }
      }
    }
  }
  return out;
}

/** Where a real value lacks the shape the docs show: every key the docs show, with a value of the same type. */
function shapeProblems(shown: unknown, real: unknown, path: string): string[] {
  if (shown === null) return [];
  if (Array.isArray(shown)) {
    if (!Array.isArray(real)) return [`${path}: an array in the docs, ${JSON.stringify(real)?.slice(0, 80)} here`];
    if (shown.length === 0) return [];
    if (real.length === 0) return [`${path}: items in the docs, none here`];
    return shapeProblems(shown[0], real[0], `${path}[0]`);
  }
  if (typeof shown === 'object') {
    if (real === null || typeof real !== 'object' || Array.isArray(real))
      return [`${path}: an object in the docs, ${JSON.stringify(real)?.slice(0, 80)} here`];
    return Object.entries(shown).flatMap(([k, v]) =>
      k in real ? shapeProblems(v, (real as Record<string, unknown>)[k], `${path}.${k}`) : [`${path}.${k}: missing`],
    );
  }
  return typeof real === typeof shown || real === null
    ? []
    : [`${path}: a ${typeof shown} in the docs, ${typeof real}`];
}

const DURATION = /^\d+(ms|s|m|h|d)(\d+(s|m|h))?$/;
const tokens = (line: string) => line.trim().split(/\s+/);

/** Whether a line the docs show matches a real line: token by token, ages and durations aside. */
const sameLine = (shown: string, real: string) => {
  const a = tokens(shown);
  const b = tokens(real);
  return a.length === b.length && a.every((t, i) => t === b[i] || (DURATION.test(t) && DURATION.test(b[i] ?? '')));
};

/** Why the output the docs show is not what the block printed (empty when it is). */
export function outputProblems(shown: Block, printed: string): string[] {
  const docs = jsonValues(shown.text);
  if (shown.lang === 'json') {
    const real = jsonValues(printed).at(-1);
    if (docs.length !== 1) return [`${where(shown)}: the docs' output is not one JSON value`];
    if (real === undefined) return [`${where(shown)}: the block printed no JSON:\n${printed}`];
    return shapeProblems(docs[0], real, '$').map((p) => `${where(shown)}: ${p}`);
  }
  const lines = printed.split('\n').filter((l) => l.trim());
  return shown.text
    .split('\n')
    .filter((l) => l.trim())
    .filter((l) => !lines.some((r) => sameLine(l, r)))
    .map((l) => `${where(shown)}: no printed line like ${JSON.stringify(l)} in:\n${printed}`);
}

/** Whether a block runs a coding-agent CLI (then the suite installs them). */
export const usesAgentCli = (text: string) => /^\s*(claude|codex)\b/m.test(text);
