import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The fenced code blocks of README.md and docs/**\/*.md, each with the runner that checks it.
 * A block says how it is run in an HTML comment on the line before its fence (invisible on
 * GitHub): `<!-- run: NAME ARGS -->`. Runners:
 *
 * - `standalone`: shell commands (or a TypeScript program) run against a real standalone
 *   gateway process with the Ollama double behind it (e2e/no-cluster/docs.e2e.test.ts).
 * - `cluster`: shell commands (kubectl, helm, curl) run against the e2e tier's control plane
 *   (e2e/control-plane/docs.e2e.test.ts).
 * - `validate`: YAML manifests: ours are validated by the CRD validators (unit tier) and every
 *   document is applied with a server-side dry run (control-plane suite); a JSON AWS policy is
 *   compared with what operator/external-provider/iam-policy.ts renders (unit tier).
 * - `values`: Helm values for charts/platform-ai-optimizer: checked against values.schema.json
 *   (unit tier) and rendered with `helm template` (control-plane suite).
 * - `prometheus`: a PrometheusRule; every metric its expressions name must exist (unit tier).
 * - `output`: what the block before it prints; the suite that ran that block compares them.
 * - `diagram`: a picture in text; the repository paths it names must exist (unit tier).
 * - `no (why)`: not run, for the reason given; the unit test lists these.
 *
 * `file=PATH` on a standalone or cluster block writes the block to PATH (under the sandbox
 * HOME when it starts with ~/) for the blocks after it instead of running it; `status=N` on a
 * block whose curl calls must answer N (default: every call answers below 400).
 */

const RUNNERS = ['standalone', 'cluster', 'validate', 'values', 'prometheus', 'output', 'diagram', 'no'] as const;
type Runner = (typeof RUNNERS)[number];

export interface Block {
  /** Repository-relative path of the Markdown file. */
  file: string;
  /** 1-based line of the opening fence. */
  line: number;
  /** The info string's first word (sh, yaml, ts, json, ...). */
  lang: string;
  text: string;
  /** Undefined when no directive precedes the block: the unit test fails on such a block. */
  runner: Runner | undefined;
  /** What follows the runner's name in the directive (for `no`, the reason in parentheses). */
  args: string;
}

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** README.md and every Markdown file under docs/, repository-relative, sorted. */
export function docFiles(root = ROOT): string[] {
  const walk = (dir: string): string[] =>
    readdirSync(join(root, dir), { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? walk(join(dir, e.name)) : e.name.endsWith('.md') ? [join(dir, e.name)] : [],
    );
  return ['README.md', ...walk('docs').sort()];
}

const DIRECTIVE = /^<!--\s*run:\s*([a-z]+)\s*(.*?)\s*-->$/;
const FENCE = /^(\s*)(`{3,}|~{3,})\s*([^\s`]*)/;

/** The fenced blocks of one Markdown text, with the directive before each. */
export function extractBlocks(file: string, markdown: string): Block[] {
  const lines = markdown.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = FENCE.exec(lines[i] ?? '');
    if (!open) continue;
    const [, indent = '', fence = '', lang = ''] = open;
    const body: string[] = [];
    let j = i + 1;
    // A closing fence: the same character, at least as many, nothing else on the line.
    const closes = (l: string) => {
      const t = l.trim();
      return t.length >= fence.length && t === (fence[0] ?? '`').repeat(t.length);
    };
    for (; j < lines.length && !closes(lines[j] ?? ''); j++) {
      const l = lines[j] ?? '';
      body.push(l.startsWith(indent) ? l.slice(indent.length) : l);
    }
    let k = i - 1;
    while (k >= 0 && (lines[k] ?? '').trim() === '') k--;
    const directive = DIRECTIVE.exec((lines[k] ?? '').trim());
    const name = directive?.[1];
    blocks.push({
      file,
      line: i + 1,
      lang,
      text: `${body.join('\n')}\n`,
      runner: RUNNERS.find((r) => r === name),
      args: directive?.[2] ?? '',
    });
    i = j;
  }
  return blocks;
}

/** Every block of README.md and docs/. */
export function allBlocks(root = ROOT): Block[] {
  return docFiles(root).flatMap((f) => extractBlocks(f, readFileSync(join(root, f), 'utf8')));
}

export const where = (b: Block): string => `${b.file}:${b.line}`;

/** A directive's `key=value` options (values without spaces). */
export function option(b: Block, key: string): string | undefined {
  return new RegExp(`(?:^|\\s)${key}=(\\S+)`).exec(b.args)?.[1];
}

/**
 * Values the runners put in for the placeholders a reader replaces: each is what the test
 * doubles accept (the hosted double's keys), or a harmless stand-in. A runnable block with a
 * placeholder missing here fails the unit test, so none reaches a shell as `<...>`.
 */
export const PLACEHOLDERS: Readonly<Record<string, string>> = {
  '<registry>': 'registry.local',
  '<OpenAI project key>': 'sk-docs-openai-key-0001',
  '<Anthropic key>': 'sk-ant-docs-key-0001',
  '<Azure OpenAI key>': 'docs-azure-key-0001',
  '<server key>': 'docs-compatible-key-0001',
  '<password>': 'docs-password',
  '<aws access key id>': 'AKIAIOSFODNN7EXAMPLE',
  '<aws secret access key>': 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
  '<ACCOUNT_ID>': '123456789012',
  '<GATEWAY_PRINCIPAL_ARN>': 'arn:aws:iam::999999999999:role/gateway',
};

/** Placeholders (`<words>`) in a block's text. Shell here-documents (`<<'EOF'`) and redirections are not. */
export function placeholdersIn(text: string): string[] {
  return [...text.matchAll(/<[A-Za-z][A-Za-z0-9 _.-]*>/g)].map((m) => m[0]);
}

export function fillPlaceholders(text: string): string {
  return text.replace(/<[A-Za-z][A-Za-z0-9 _.-]*>/g, (p) => PLACEHOLDERS[p] ?? p);
}

/** The bodies of the here-documents of a shell block (`<<'EOF' ... EOF`, `<<EOF`, `<<-EOF`). */
export function hereDocuments(text: string): string[] {
  const out: string[] = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const m = /<<-?\s*'?"?([A-Za-z_]+)'?"?/.exec(lines[i] ?? '');
    if (!m?.[1]) continue;
    const end = lines.findIndex((l, j) => j > i && l.trim() === m[1]);
    if (end < 0) continue;
    out.push(lines.slice(i + 1, end).join('\n'));
    i = end;
  }
  return out;
}

/**
 * Repository paths a page names in backticks or links (crds/..., proxy/..., docs/...):
 * each must exist, so a page never sends a reader to a file that moved.
 */
export function namedPaths(file: string, markdown: string): string[] {
  const prose = markdown.replace(/^(\s*)(`{3,}|~{3,})[\s\S]*?^\1\2\s*$/gm, '');
  const spans = [...prose.matchAll(/`((?:crds|proxy|operator|charts|e2e|docs)\/[A-Za-z0-9_./-]+)`/g)].map((m) => m[1]);
  const links = [...prose.matchAll(/\]\((?!https?:|#|mailto:)([^)#\s]+)(?:#[^)]*)?\)/g)].map((m) =>
    relative(ROOT, join(ROOT, file, '..', m[1] ?? '')),
  );
  return [...spans, ...links].filter((p): p is string => p !== undefined && !/[*<{]/.test(p));
}
