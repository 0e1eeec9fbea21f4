import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FetchLike } from '@modelcontextprotocol/client';
import type { ErrorObject, ValidateFunction } from 'ajv';
import { Ajv2020 } from 'ajv/dist/2020.js';
import ajvFormats from 'ajv-formats';
import { createParser } from 'eventsource-parser';
import { installClients } from '../support/agent-clients.js';
import { cacheRoot } from '../support/cache-root.js';

/**
 * The MCP specification's JSON schema for the revision the gateway negotiates (2025-11-25), and
 * a check of every message the gateway sends against it.
 *
 * Where the schema comes from. The specification publishes schema/2025-11-25/schema.json in its
 * GitHub repository (modelcontextprotocol/modelcontextprotocol), generated there from
 * schema/2025-11-25/schema.ts by scripts/generate-schemas.ts:
 *
 *   typescript-json-schema --defaultNumberType integer --required --skipLibCheck schema.ts "*"
 *
 * then, for 2025-11-25 and later, moved to JSON Schema 2020-12 (the $schema URL, "definitions"
 * renamed "$defs" and every "#/definitions/" reference with it) and given the $id
 * https://modelcontextprotocol.io/schemas/2025-11-25/schema.json. GitHub is not reachable from
 * the machines these tests run on, and nothing fetched from it may go into a test, so the schema
 * is generated here the same way from the same TypeScript source, both taken from npm and pinned
 * in e2e/clients/package.json:
 *
 * - the source: @modelcontextprotocol/sdk 1.26.0, dist/esm/spec.types.d.ts, the official SDK's
 *   verbatim copy of the specification's schema.ts ("Last updated from commit:
 *   35fa160caf287a9c48696e3ae452c0645c713669", the commit that set the 2025-11-25 revision's
 *   LATEST_PROTOCOL_VERSION; the SDK copies schema/draft/schema.ts of that commit, which differs
 *   from schema/2025-11-25/schema.ts only in that constant, "DRAFT-2026-v1", and in the
 *   revision named by doc links: neither reaches a validation keyword). SDK versions 1.25.0 to
 *   1.28.0 carry this file byte for byte; 1.29.0 and later add capabilities' "extensions" of
 *   a later draft, 1.24.x an earlier draft;
 * - the generator: typescript-json-schema 0.65.1 (with the TypeScript 5.5 it brings), the
 *   version the specification's package-lock.json held at that commit, run with the flags above.
 *
 * The generated definitions are those of the released 2025-11-25 schema.json keyword for keyword
 * (descriptions aside). The specification has since amended that file twice, both times
 * loosening it: NumberSchema's minimum, maximum and default numbers rather than integers (an
 * elicitation form field), Task.ttl nullable (tasks); neither type occurs in what the gateway
 * sends, and neither is applied here.
 *
 * The schema is generated once per input and generator, into
 * ~/.cache/platform-ai-optimizer/mcp-spec-schema-<hash>.json.
 */

export const SCHEMA_REVISION = '2025-11-25';
const SCHEMA_ID = `https://modelcontextprotocol.io/schemas/${SCHEMA_REVISION}/schema.json`;
const SOURCE_COMMIT = '35fa160caf287a9c48696e3ae452c0645c713669';
const FLAGS = ['--defaultNumberType', 'integer', '--required', '--skipLibCheck'];

/** Definitions the checks below use: a generator or source that lost one is not the spec's. */
const REQUIRED_DEFINITIONS = [
  'JSONRPCMessage',
  'JSONRPCRequest',
  'JSONRPCResultResponse',
  'JSONRPCErrorResponse',
  'JSONRPCNotification',
  'Result',
  'EmptyResult',
  'InitializeResult',
  'ListToolsResult',
  'CallToolResult',
  'ListPromptsResult',
  'GetPromptResult',
  'ListResourcesResult',
  'ListResourceTemplatesResult',
  'ReadResourceResult',
  'CompleteResult',
  'ServerNotification',
  'ServerRequest',
  'ProgressNotification',
  'LoggingMessageNotification',
  'CancelledNotification',
];

type Json = { [key: string]: unknown };
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

let memo: Json | undefined;

/** The JSON schema of MCP 2025-11-25 (JSON Schema 2020-12, definitions under $defs). */
export function specSchema(): Json {
  if (memo) return memo;
  const clients = installClients();
  const source = join(clients, 'node_modules', '@modelcontextprotocol', 'sdk', 'dist', 'esm', 'spec.types.d.ts');
  const text = readFileSync(source, 'utf8');
  if (!text.includes(`Last updated from commit: ${SOURCE_COMMIT}`)) {
    throw new Error(`${source} is not the specification's schema.ts of commit ${SOURCE_COMMIT}: pin the SDK back`);
  }
  const version = (pkg: string) =>
    String((JSON.parse(readFileSync(join(clients, 'node_modules', pkg, 'package.json'), 'utf8')) as Json).version);
  const generator = `typescript-json-schema@${version('typescript-json-schema')} typescript@${version('typescript')}`;
  const hash = createHash('sha256')
    .update(text)
    .update(generator)
    .update(FLAGS.join(' '))
    .update(SCHEMA_ID)
    .digest('hex')
    .slice(0, 12);
  const file = join(cacheRoot(), `mcp-spec-schema-${hash}.json`);
  if (!existsSync(file)) {
    const work = mkdtempSync(join(tmpdir(), 'pao-mcp-schema-'));
    try {
      // The spec's invocation, on its file name: a .ts file holding the schema's TypeScript.
      copyFileSync(source, join(work, 'schema.ts'));
      const generated = execFileSync(
        join(clients, 'node_modules', '.bin', 'typescript-json-schema'),
        [...FLAGS, 'schema.ts', '*'],
        { cwd: work, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 },
      );
      mkdirSync(cacheRoot(), { recursive: true });
      const tmp = `${file}.tmp-${process.pid}`;
      writeFileSync(tmp, to202012(generated));
      renameSync(tmp, file);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }
  const schema = JSON.parse(readFileSync(file, 'utf8')) as Json;
  const defs = isObject(schema.$defs) ? schema.$defs : {};
  const missing = REQUIRED_DEFINITIONS.filter((d) => !(d in defs));
  if (missing.length > 0) throw new Error(`the generated schema ${file} lacks ${missing.join(', ')}`);
  memo = schema;
  return schema;
}

/** What scripts/generate-schemas.ts of the specification does to the generator's draft-07 output. */
function to202012(generated: string): string {
  const moved = generated
    .replace(/http:\/\/json-schema\.org\/draft-07\/schema#/g, 'https://json-schema.org/draft/2020-12/schema')
    .replace(/"definitions":/g, '"$defs":')
    .replace(/#\/definitions\//g, '#/$defs/');
  return moved.replace(/^\{\n/, `{\n    "$id": ${JSON.stringify(SCHEMA_ID)},\n`);
}

/** The result each method answers with, by the schema's definitions. */
const RESULTS: Readonly<Record<string, string>> = {
  initialize: 'InitializeResult',
  ping: 'EmptyResult',
  'tools/list': 'ListToolsResult',
  'tools/call': 'CallToolResult',
  'prompts/list': 'ListPromptsResult',
  'prompts/get': 'GetPromptResult',
  'resources/list': 'ListResourcesResult',
  'resources/templates/list': 'ListResourceTemplatesResult',
  'resources/read': 'ReadResourceResult',
  'resources/subscribe': 'EmptyResult',
  'resources/unsubscribe': 'EmptyResult',
  'completion/complete': 'CompleteResult',
  'logging/setLevel': 'EmptyResult',
};

interface Validators {
  def(name: string): ValidateFunction;
  /** Notification (and request) definitions of the server, by their method. */
  notifications: ReadonlyMap<string, string>;
  requests: ReadonlyMap<string, string>;
}

let compiled: Validators | undefined;

function validators(): Validators {
  if (compiled) return compiled;
  const schema = specSchema();
  // As the specification's own scripts/validate-examples.ts: Ajv 2020-12, all errors, formats.
  const ajv = new Ajv2020({ allErrors: true, strict: false });
  ajvFormats.default(ajv);
  ajv.addSchema(schema);
  const cache = new Map<string, ValidateFunction>();
  const def = (name: string): ValidateFunction => {
    let v = cache.get(name);
    if (!v) {
      v = ajv.compile({ $ref: `${SCHEMA_ID}#/$defs/${name}` });
      cache.set(name, v);
    }
    return v;
  };
  const defs = schema.$defs as Json;
  const byMethod = (union: string): Map<string, string> => {
    const out = new Map<string, string>();
    const anyOf = (defs[union] as Json).anyOf;
    for (const ref of Array.isArray(anyOf) ? anyOf : []) {
      const name = isObject(ref) && typeof ref.$ref === 'string' ? ref.$ref.replace('#/$defs/', '') : '';
      const method = ((defs[name] as Json | undefined)?.properties as Json | undefined)?.method;
      if (isObject(method) && typeof method.const === 'string') out.set(method.const, name);
    }
    return out;
  };
  compiled = { def, notifications: byMethod('ServerNotification'), requests: byMethod('ServerRequest') };
  return compiled;
}

const describe = (definition: string, errors: ErrorObject[] | null | undefined): string[] =>
  (errors ?? []).map(
    (e) => `${definition}${e.instancePath || ''}: ${e.message ?? e.keyword} ${JSON.stringify(e.params)}`,
  );

function check(definition: string, value: unknown): string[] {
  const v = validators().def(definition);
  return v(value) ? [] : describe(definition, v.errors);
}

/**
 * What is wrong with one message the gateway sent, by the schema of 2025-11-25 (empty: valid).
 * `method` is that of the request it answers (undefined: a message on no request's stream). A
 * message is a JSON-RPC result, error or notification (or a request of the server's, which the
 * gateway never sends); a result is its method's result, a notification a ServerNotification.
 */
export function validateGatewayMessage(method: string | undefined, message: unknown): string[] {
  if (!isObject(message)) return [`not a JSON-RPC message: ${JSON.stringify(message)?.slice(0, 200)}`];
  const v = validators();
  if ('result' in message) {
    const envelope = check('JSONRPCResultResponse', message);
    if (envelope.length > 0) return envelope;
    const result = method === undefined ? 'Result' : (RESULTS[method] ?? 'Result');
    return check(result, message.result);
  }
  if ('error' in message) return check('JSONRPCErrorResponse', message);
  if (typeof message.method === 'string' && 'id' in message) {
    const envelope = check('JSONRPCRequest', message);
    if (envelope.length > 0) return envelope;
    const definition = v.requests.get(message.method);
    return definition
      ? check(definition, message)
      : [`${message.method}: not a request a server sends (ServerRequest)`];
  }
  if (typeof message.method === 'string') {
    const envelope = check('JSONRPCNotification', message);
    if (envelope.length > 0) return envelope;
    const definition = v.notifications.get(message.method);
    // Known: its own definition (precise errors); unknown: the union says it is none of them.
    return definition ? check(definition, message) : check('ServerNotification', message);
  }
  return [`neither a result, an error nor a notification: ${JSON.stringify(message).slice(0, 200)}`];
}

/** One message the gateway sent on the answer to one POST. */
interface CapturedMessage {
  /** The POST's URL. */
  url: string;
  /** The JSON-RPC method of the POSTed request (undefined: a notification, a response, not JSON-RPC). */
  method: string | undefined;
  status: number;
  /** How it came: the JSON body, or one event of the SSE stream. */
  via: 'json' | 'sse';
  /** The message as parsed, or, when it was not JSON, its text in `unparsed`. */
  message: unknown;
  unparsed?: string;
  /** The POST's MCP-Protocol-Version header, where it had one: the revision it was sent in. */
  revision?: string;
}

/** Where capturingFetch puts what it reads; settled() waits for the streams still being read. */
export class CaptureSink {
  readonly messages: CapturedMessage[] = [];
  private readonly reading = new Set<Promise<void>>();

  track(p: Promise<void>): void {
    this.reading.add(p);
    void p.finally(() => this.reading.delete(p));
  }

  async settled(): Promise<void> {
    while (this.reading.size > 0) await Promise.allSettled([...this.reading]);
  }
}

function methodOf(body: unknown): string | undefined {
  if (typeof body !== 'string') return undefined;
  try {
    const m: unknown = JSON.parse(body);
    return isObject(m) && typeof m.method === 'string' && 'id' in m ? m.method : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A fetch for the SDK client transport's `fetch` option (or for a test's own requests) that
 * records, for every POST, the request's JSON-RPC method and each message of the answer: an
 * application/json body, or each `data:` event of a text/event-stream. The body is teed, so the
 * client reads the stream as it came, as it comes.
 */
export function capturingFetch(sink: CaptureSink, base: FetchLike = fetch): FetchLike {
  return async (url, init) => {
    const res = await base(url, init);
    if ((init?.method ?? 'GET').toUpperCase() !== 'POST' || !res.body) return res;
    const type = (res.headers.get('content-type') ?? '').toLowerCase();
    const via = type.startsWith('text/event-stream') ? 'sse' : type.startsWith('application/json') ? 'json' : undefined;
    if (!via) return res;
    const [mine, theirs] = res.body.tee();
    const revision = new Headers(init?.headers).get('mcp-protocol-version') ?? undefined;
    const base_ = {
      url: String(url),
      method: methodOf(init?.body),
      status: res.status,
      via,
      ...(revision ? { revision } : {}),
    } as const;
    const record = (text: string) => {
      try {
        sink.messages.push({ ...base_, message: JSON.parse(text) as unknown });
      } catch {
        sink.messages.push({ ...base_, message: undefined, unparsed: text.slice(0, 2000) });
      }
    };
    sink.track(readAll(mine, via, record));
    return new Response(theirs, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

async function readAll(
  body: ReadableStream<Uint8Array>,
  via: 'json' | 'sse',
  record: (text: string) => void,
): Promise<void> {
  const decoder = new TextDecoder();
  let text = '';
  const parser = createParser({
    onEvent: (e) => {
      // An event without data (an SSE priming event, an id for resumption) carries no message.
      if (e.data !== '') record(e.data);
    },
  });
  try {
    for await (const chunk of body) {
      const s = decoder.decode(chunk, { stream: true });
      if (via === 'sse') parser.feed(s);
      else text += s;
    }
  } catch {
    // The client went away mid-stream: what came so far is recorded.
  }
  const rest = decoder.decode();
  if (via === 'sse') parser.feed(rest);
  else if (text + rest !== '') record(text + rest);
}
