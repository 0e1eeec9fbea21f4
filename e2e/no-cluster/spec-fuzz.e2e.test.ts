import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type OllamaDouble, startOllamaDouble } from '../doubles/ollama.js';
import { type ProxyProcess, routedModel, standaloneFiles, startProxyProcess } from '../support/proxy-process.js';
import { completionChunkSchema, readSpecs, type Spec } from '../support/spec-check.js';

/**
 * A spec-driven fuzz run: schemathesis (pinned, e2e/python/fuzz-requirements.txt) reads the
 * vendors' published OpenAPI documents, restricted to the operations the gateway serves and
 * rebased onto its paths, and sends what they allow (and, in its negative phase, what they do
 * not) to a standalone gateway in front of the Ollama double. A fixed seed and a bounded number
 * of examples per operation keep the run reproducible and short. Any finding fails the test,
 * printed whole: a 5xx that is not a retryable 503 with Retry-After (e2e/python/fuzz-checks.py),
 * an answer that is not the schema the spec gives it, a status the spec does not document.
 */

const run = promisify(execFile);
const KEY = 'sk-spec-fuzz-e2e-7d3b1a';
const MODEL = 'llama3.1:8b';
/** Fixed, so a run sends the same requests; SPEC_FUZZ_SEED, _EXAMPLES and _PHASES make a deeper run locally. */
const SEED = process.env.SPEC_FUZZ_SEED ?? '45';
/**
 * Per operation and phase: bounds the run to about a minute on a loaded 2-core machine. More for
 * Anthropic's two operations, which skip the coverage phase.
 */
const EXAMPLES = {
  openai: process.env.SPEC_FUZZ_EXAMPLES ?? '30',
  anthropic: process.env.SPEC_FUZZ_EXAMPLES ?? '100',
};
/**
 * Every phase for OpenAI's operations; Anthropic's without the coverage phase, whose boundary
 * cases of the Messages schema alone (some 15,000 requests) take about 150 s here.
 */
const PHASES = {
  openai: process.env.SPEC_FUZZ_PHASES ?? 'examples,coverage,fuzzing,stateful',
  anthropic: process.env.SPEC_FUZZ_PHASES ?? 'examples,fuzzing',
};
const PYTHON = join(import.meta.dirname, '..', 'python');

/** The operations the gateway serves, per spec (path -> methods). */
const OPERATIONS = {
  openai: {
    '/chat/completions': ['post'],
    '/completions': ['post'],
    '/embeddings': ['post'],
    '/responses': ['post'],
    '/responses/{response_id}': ['get', 'delete'],
    '/responses/{response_id}/input_items': ['get'],
    '/responses/{response_id}/cancel': ['post'],
    '/models': ['get'],
    '/models/{model}': ['get'],
  },
  anthropic: { '/v1/messages': ['post'], '/v1/messages/count_tokens': ['post'] },
} satisfies Record<'openai' | 'anthropic', Record<string, string[]>>;

type Json = Record<string, unknown>;
const isRecord = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The request schemas reachable from the kept operations' bodies, narrowed within what the spec
 * allows: `model` is one of the gateway's models (the spec's own, any string or the vendor's
 * names, would only ever reach the unknown-model 404), and `stream`, where the operation has
 * it, is always sent as true or false (left optional, schemathesis almost never sends it, and
 * the streams would go untested). A schema's allOf members and $refs are followed.
 */
function narrow(spec: Spec, schema: unknown, seen = new Set<unknown>()): void {
  if (!isRecord(schema) || seen.has(schema)) return;
  seen.add(schema);
  const ref = typeof schema.$ref === 'string' ? schema.$ref.split('/').pop() : undefined;
  if (ref) {
    narrow(spec, spec.components.schemas[ref], seen);
    return;
  }
  const props = schema.properties;
  if (isRecord(props) && 'model' in props) props.model = { type: 'string', enum: [MODEL] };
  if (isRecord(props) && 'stream' in props) {
    props.stream = { type: 'boolean' };
    schema.required = [...((schema.required as string[]) ?? []), 'stream'];
  }
  for (const member of [...((schema.allOf as unknown[]) ?? [])]) narrow(spec, member, seen);
}

/**
 * A Responses request the gateway can route: it names its model (the spec lets a stored prompt
 * template name it instead), and neither a stored prompt template nor a conversation object,
 * which only OpenAI itself resolves (the gateway refuses them, by name, for other upstreams).
 * Without this, 9 of 10 generated Responses requests are those refusals.
 */
const ROUTABLE_RESPONSE = { required: ['model'], properties: { prompt: false, conversation: false } };

/**
 * Each event of a stream as schemathesis reads it: an SSE event whose `data` is JSON of the
 * event's schema (OpenAPI 3.2's itemSchema; the vendors' 3.1 documents give the payload's schema
 * as the stream's, which schemathesis would hold the event envelope to), or OpenAI's `[DONE]`.
 * The streams the specs leave out are added as their documentation describes them: the legacy
 * completions stream (chunks of the completion object, finish_reason null until the last) and
 * Anthropic's Messages stream (MessageStreamEvent, plus the `ping` and `error` events it documents).
 */
function streams(name: 'openai' | 'anthropic', spec: Spec): void {
  const event = (payload: unknown) => ({
    itemSchema: {
      type: 'object',
      required: ['data'],
      properties: {
        data: {
          anyOf: [
            { const: '[DONE]' },
            { type: 'string', contentMediaType: 'application/json', contentSchema: payload },
          ],
        },
      },
    },
  });
  const ref = (n: string) => ({ $ref: `#/components/schemas/${n}` });
  const payloads: Record<string, unknown> =
    name === 'openai'
      ? {
          '/chat/completions': ref('CreateChatCompletionStreamResponse'),
          '/completions': completionChunkSchema(spec),
          '/responses': ref('ResponseStreamEvent'),
        }
      : {
          '/v1/messages': {
            anyOf: [
              ref('MessageStreamEvent'),
              ref('ErrorResponse'),
              { type: 'object', required: ['type'], properties: { type: { const: 'ping' } } },
            ],
          },
        };
  for (const [path, payload] of Object.entries(payloads)) {
    const ok = spec.paths[path]?.post?.responses['200']?.content;
    if (ok) ok['text/event-stream'] = event(payload) as unknown as { schema: unknown };
  }
}

/**
 * The spec as the gateway serves it: only its operations, its base URL, and what the vendor's
 * documentation says beside the schema: OpenAI's errors are all ErrorResponse (the spec lists
 * only the 200 answer, or the bare Error object for two 404s, where the API answers the
 * envelope its SDKs read), and its streams' events as schemathesis reads them (streams()).
 */
function gatewaySpec(name: 'openai' | 'anthropic', base: string): Json {
  const spec = structuredClone(readSpecs()[name]);
  const paths: Record<string, Json> = {};
  for (const [path, methods] of Object.entries(OPERATIONS[name] as Record<string, string[]>)) {
    const item = spec.paths[path] ?? {};
    paths[path] = Object.fromEntries(
      Object.entries(item).filter(([k]) => methods.includes(k) || k === 'parameters'),
    ) as Json;
    for (const m of methods) {
      const op = item[m];
      if (!op) throw new Error(`${name} spec has no ${m.toUpperCase()} ${path}`);
      const body = op.requestBody?.content['application/json'];
      narrow(spec, body?.schema);
      if (body && path === '/responses') body.schema = { allOf: [body.schema, ROUTABLE_RESPONSE] };
      if (name !== 'openai') continue;
      const envelope = { content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorResponse' } } } };
      // The spec's few documented errors (DELETE's and cancel's 404) give the bare Error; the API answers the envelope.
      for (const status of Object.keys(op.responses).filter((k) => k !== '200')) op.responses[status] = envelope;
      op.responses.default = envelope;
    }
  }
  streams(name, spec);
  return { ...(spec as unknown as Json), servers: [{ url: base }], paths };
}

let double: OllamaDouble;
let proxy: ProxyProcess;
let dir: string;
let st: string;

beforeAll(async () => {
  st =
    execFileSync('bash', [join(PYTHON, 'fuzz-venv.sh')], { encoding: 'utf8' })
      .trim()
      .split('\n')
      .pop() ?? '';
  double = await startOllamaDouble({ models: [MODEL] });
  dir = mkdtempSync(join(tmpdir(), 'pao-spec-fuzz-'));
  proxy = await startProxyProcess([
    ...standaloneFiles(dir, [routedModel(MODEL, double.url)], `${KEY}\n`),
    '--usage-db',
    ':memory:',
  ]);
}, 300_000);

afterAll(async () => {
  await proxy?.stop('SIGTERM');
  await double?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** What one schemathesis run found: its summary lines and every failure it printed. */
async function fuzz(
  name: 'openai' | 'anthropic',
  base: string,
  headers: string[],
  positive = false,
): Promise<{ code: number; out: string }> {
  const file = join(dir, `${name}.json`);
  writeFileSync(file, JSON.stringify(gatewaySpec(name, base)));
  const args = [
    'run',
    file,
    '--url',
    base,
    ...headers.flatMap((h) => ['--header', h]),
    ...(positive
      ? ['--mode', 'positive', '--checks', 'served_or_refused_by_upstream', '--phases', 'examples,fuzzing']
      : [
          '--checks',
          'retryable_or_not_server_error,response_schema_conformance,status_code_conformance,content_type_conformance',
          '--phases',
          PHASES[name],
        ]),
    '--seed',
    SEED,
    '--max-examples',
    EXAMPLES[name],
    '--continue-on-failure',
    '--generation-database',
    'none',
    '--generation-with-security-parameters',
    'false',
    // One worker: Hypothesis' lambda-source cache is not thread-safe (a KeyError, reported as a flaky runtime error).
    '--workers',
    '1',
    '--no-color',
  ];
  try {
    const { stdout } = await run(st, args, {
      // In the run's own folder: whatever schemathesis keeps between runs stays out of the repo.
      cwd: dir,
      env: { ...process.env, SCHEMATHESIS_HOOKS: join(PYTHON, 'fuzz-checks.py') },
      maxBuffer: 64 * 1024 * 1024,
      timeout: 240_000,
    });
    return { code: 0, out: stdout };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: err.code ?? -1, out: `${err.stdout ?? ''}\n${err.stderr ?? ''}` };
  }
}

/**
 * Passes when schemathesis found nothing; fails with the summary first, then its whole report.
 * (Not kept in .e2e-artifacts/logs: the secret scan reads that as the product's own output.)
 */
function verdict(name: string, code: number, out: string): void {
  const { cases, lines } = findings(out);
  const operations = /Operations:\s+(.+)/.exec(out)?.[1] ?? '? operations';
  const summary = `schemathesis, ${name}: ${operations}, ${cases}; ${lines.length} finding(s)${lines.map((l) => `\n  ${l}`).join('')}`;
  console.log(summary);
  expect(code, `${summary}\n\n${out}`).toBe(0);
}

/**
 * The run's findings from its report on stdout, one line per operation and failure: the check
 * (ST code and title) and what each violation said. With the test-case count, these are the
 * numbers the issue's closing note compares before and after the fixes.
 */
/**
 * The lines schemathesis prints under a schema violation: its message is two lines above them.
 * Another failure's message (a server error's) is the first line under its title.
 */
const NOTE = /^ {4}(Validated against|Schema at)/;

function findings(out: string): { cases: string; lines: string[] } {
  const text = out.split('\n');
  const lines: string[] = [];
  let op = '';
  let failure = '';
  const said: string[] = [];
  const flush = () => {
    if (failure) lines.push(`${op}: ${failure}${said.length ? `: ${[...new Set(said)].join('; ')}` : ''}`);
    said.length = 0;
  };
  for (const [i, line] of text.entries()) {
    const heading = /^_{3,} (.+?) _{3,}$/.exec(line);
    const check = /^- (.+)$/.exec(line);
    if (heading) {
      flush();
      failure = '';
      op = heading[1] ?? '';
    } else if (op && check) {
      flush();
      failure = check[1] ?? '';
    } else if (
      failure &&
      /^ {4}\S/.test(line) &&
      !NOTE.test(line) &&
      (NOTE.test(text[i + 2] ?? '') || /^- /.test(text[i - 2] ?? ''))
    )
      said.push(line.trim());
    else if (/^=+ (WARNINGS|SUMMARY) =+$/.test(line)) {
      flush();
      failure = '';
      op = '';
    }
  }
  flush();
  const cases = /Test cases:\s*\n\s*(.+)/.exec(out)?.[1] ?? 'no test-case count (the run did not finish)';
  return { cases, lines };
}

describe("schemathesis against the gateway, from the vendors' specifications", () => {
  it("OpenAI's operations, positive: every request the spec accepts is served", async () => {
    const { code, out } = await fuzz('openai', `${proxy.base}/openai/v1`, [`Authorization: Bearer ${KEY}`], true);
    verdict('openai positive', code, out);
  }, 300_000);

  it("Anthropic's operations, positive: every request the spec accepts is served", async () => {
    const { code, out } = await fuzz(
      'anthropic',
      `${proxy.base}/anthropic`,
      [`x-api-key: ${KEY}`, 'anthropic-version: 2023-06-01'],
      true,
    );
    verdict('anthropic positive', code, out);
  }, 300_000);

  it("OpenAI's operations: no server error, answers and statuses as the spec says", async () => {
    const { code, out } = await fuzz('openai', `${proxy.base}/openai/v1`, [`Authorization: Bearer ${KEY}`]);
    verdict('openai', code, out);
  }, 300_000);

  it("Anthropic's operations: no server error, answers and statuses as the spec says", async () => {
    const { code, out } = await fuzz('anthropic', `${proxy.base}/anthropic`, [
      `x-api-key: ${KEY}`,
      'anthropic-version: 2023-06-01',
    ]);
    verdict('anthropic', code, out);
  }, 300_000);
});
