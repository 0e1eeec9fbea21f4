import { EventStreamCodec } from '@smithy/eventstream-codec';
import { fromUtf8, toUtf8 } from '@smithy/util-utf8';

/**
 * Checks what the AWS double (e2e/doubles/aws.ts) sends and receives against botocore's service
 * models (service-2.json, the definitions the AWS SDKs are generated from), so the double cannot
 * drift from AWS's own definitions. Pure functions: a value against a shape, raw HTTP exchanges of
 * the restJson1 (Bedrock) and awsQuery (STS) protocols against an operation, and
 * vnd.amazon.eventstream bodies against an event-stream union. Each returns problems with paths.
 *
 * Where botocore's JSON leaves semantics implicit: a pattern must match the whole value, as AWS's
 * services check them (STS refuses the session name `a b` for `[\w+=,.@-]*`; a pattern that
 * JavaScript cannot compile is skipped), string lengths count code points, blobs travel as base64
 * in JSON, XML and query strings, and unknown members are errors (clients tolerate them, a double
 * should not rely on that).
 */

interface ShapeRef {
  shape: string;
  location?: 'uri' | 'querystring' | 'header' | 'headers' | 'statusCode';
  locationName?: string;
}

interface Shape {
  type:
    | 'structure'
    | 'list'
    | 'map'
    | 'string'
    | 'integer'
    | 'long'
    | 'float'
    | 'double'
    | 'boolean'
    | 'timestamp'
    | 'blob';
  members?: Record<string, ShapeRef>;
  required?: string[];
  union?: boolean;
  document?: boolean;
  eventstream?: boolean;
  event?: boolean;
  exception?: boolean;
  error?: { code?: string; httpStatusCode?: number; senderFault?: boolean };
  payload?: string;
  member?: ShapeRef;
  key?: ShapeRef;
  value?: ShapeRef;
  enum?: string[];
  min?: number;
  max?: number;
  pattern?: string;
  timestampFormat?: TimestampFormat;
  sparse?: boolean;
  flattened?: boolean;
}

interface Operation {
  name: string;
  http: { method: string; requestUri: string; responseCode?: number };
  input?: ShapeRef;
  output?: ShapeRef & { resultWrapper?: string };
  errors?: ShapeRef[];
}

export interface ServiceModel {
  metadata: { protocol: string; apiVersion: string; uid?: string };
  operations: Record<string, Operation>;
  shapes: Record<string, Shape>;
}

export type ProblemKind =
  | 'type'
  | 'required'
  | 'unknown-member'
  | 'union'
  | 'enum'
  | 'length'
  | 'pattern'
  | 'range'
  | 'format'
  | 'protocol';

export interface Problem {
  /** Where: `request.messages[0].content[0].text`, `response.modelSummaries[1].modelName`, `response.events[3](contentBlockDelta).delta`. */
  path: string;
  kind: ProblemKind;
  message: string;
}

type TimestampFormat = 'epoch-seconds' | 'iso8601' | 'rfc822';

interface ValidateOptions {
  /** How a timestamp without a timestampFormat trait is written where the value travels (protocol default). */
  timestamps: TimestampFormat;
  /** The value is an HTTP body: members bound to the URI, query or headers are not part of it (top level only). */
  bodyOnly?: boolean;
}

// ------------------------------------------------------------------ values against shapes

const patterns = new Map<string, RegExp | null>();

/** The models' patterns are ECMA 262 in principle, Java in places; try unicode mode first, skip what neither mode compiles. */
function patternOf(source: string): RegExp | null {
  let re = patterns.get(source);
  if (re === undefined) {
    re = null;
    for (const flags of ['u', '']) {
      try {
        re = new RegExp(`^(?:${source})$`, flags);
        break;
      } catch {
        // next mode
      }
    }
    patterns.set(source, re);
  }
  return re;
}

const ISO8601 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const INT32 = 2 ** 31;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array);
}

function memberPath(path: string, key: string): string {
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

function show(v: unknown): string {
  const s = JSON.stringify(v) ?? String(v);
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
}

/** Problems of `value` as shape `shapeName`; none means it fits. */
function validateShape(
  model: ServiceModel,
  shapeName: string,
  value: unknown,
  opts: ValidateOptions,
  path = '$',
): Problem[] {
  const problems: Problem[] = [];
  const add = (at: string, kind: ProblemKind, message: string): void => {
    problems.push({ path: at, kind, message });
  };

  const check = (name: string, v: unknown, at: string, top: boolean): void => {
    const shape = model.shapes[name];
    if (shape === undefined) {
      add(at, 'protocol', `the model has no shape ${name}`);
      return;
    }
    const expectType = (ok: boolean, what: string): boolean => {
      if (!ok) add(at, 'type', `${name} is ${what}, got ${show(v)}`);
      return ok;
    };
    switch (shape.type) {
      case 'structure': {
        if (shape.document) return void expectType(v !== undefined, 'a JSON document');
        if (!expectType(isRecord(v), 'a structure (JSON object)') || !isRecord(v)) return;
        const members = shape.members ?? {};
        const bound = (key: string) => top && opts.bodyOnly === true && members[key]?.location !== undefined;
        const set: string[] = [];
        for (const [key, mv] of Object.entries(v)) {
          const ref = members[key];
          if (ref === undefined) {
            add(memberPath(at, key), 'unknown-member', `${name} has no member ${key}`);
          } else if (bound(key)) {
            add(memberPath(at, key), 'protocol', `${name}.${key} travels in the ${ref.location}, not in the body`);
          } else if (mv === null) {
            add(memberPath(at, key), 'type', `${name}.${key} is null: leave an unset member out`);
          } else if (mv !== undefined) {
            set.push(key);
            check(ref.shape, mv, memberPath(at, key), false);
          }
        }
        if (shape.union && set.length !== 1) {
          add(at, 'union', `${name} is a union: exactly one member must be set, got [${set.join(', ')}]`);
        }
        for (const key of shape.required ?? []) {
          if (!bound(key) && (v[key] === undefined || v[key] === null)) {
            add(memberPath(at, key), 'required', `${name}.${key} is required`);
          }
        }
        return;
      }
      case 'list': {
        if (!expectType(Array.isArray(v), 'a list (JSON array)') || !Array.isArray(v)) return;
        checkLength(name, shape, v.length, at, 'items');
        const member = shape.member?.shape ?? '';
        v.forEach((item, i) => {
          if (item === null && !shape.sparse) add(`${at}[${i}]`, 'type', `${name} is not sparse: no null items`);
          else check(member, item, `${at}[${i}]`, false);
        });
        return;
      }
      case 'map': {
        if (!expectType(isRecord(v), 'a map (JSON object)') || !isRecord(v)) return;
        checkLength(name, shape, Object.keys(v).length, at, 'entries');
        for (const [k, mv] of Object.entries(v)) {
          check(shape.key?.shape ?? '', k, `${memberPath(at, k)}<key>`, false);
          if (mv === null && !shape.sparse) add(memberPath(at, k), 'type', `${name} is not sparse: no null values`);
          else check(shape.value?.shape ?? '', mv, memberPath(at, k), false);
        }
        return;
      }
      case 'string': {
        if (!expectType(typeof v === 'string', 'a string') || typeof v !== 'string') return;
        if (shape.enum && !shape.enum.includes(v)) {
          add(at, 'enum', `${name} is one of [${shape.enum.join(', ')}], got ${show(v)}`);
        }
        checkLength(name, shape, [...v].length, at, 'characters');
        const re = shape.pattern === undefined ? null : patternOf(shape.pattern);
        if (re !== null && !re.test(v)) add(at, 'pattern', `${name} must match /${shape.pattern}/, got ${show(v)}`);
        return;
      }
      case 'integer':
      case 'long': {
        const ok = typeof v === 'number' && Number.isInteger(v);
        if (!expectType(ok, `an ${shape.type}`) || typeof v !== 'number') return;
        if (shape.type === 'integer' && (v < -INT32 || v >= INT32)) add(at, 'range', `${name} is a 32-bit integer`);
        checkRange(name, shape, v, at);
        return;
      }
      case 'float':
      case 'double': {
        const special = v === 'NaN' || v === 'Infinity' || v === '-Infinity';
        if (!expectType(typeof v === 'number' || special, `a ${shape.type}`) || typeof v !== 'number') return;
        checkRange(name, shape, v, at);
        return;
      }
      case 'boolean':
        return void expectType(typeof v === 'boolean', 'a boolean');
      case 'timestamp': {
        const format = shape.timestampFormat ?? opts.timestamps;
        if (format === 'epoch-seconds')
          return void expectType(typeof v === 'number' && Number.isFinite(v), 'epoch seconds');
        if (format === 'iso8601') {
          return void expectType(typeof v === 'string' && ISO8601.test(v) && !Number.isNaN(Date.parse(v)), 'ISO 8601');
        }
        return void expectType(
          typeof v === 'string' && / GMT$/.test(v) && !Number.isNaN(Date.parse(v)),
          'an HTTP date',
        );
      }
      case 'blob': {
        if (!expectType(typeof v === 'string' && BASE64.test(v), 'base64') || typeof v !== 'string') return;
        checkLength(name, shape, Buffer.from(v, 'base64').length, at, 'bytes');
        return;
      }
      default:
        add(
          at,
          'protocol',
          `${name} has type ${String((shape as { type: unknown }).type)}, which the checker does not know`,
        );
    }
  };

  const checkLength = (name: string, shape: Shape, n: number, at: string, unit: string) => {
    if (shape.min !== undefined && n < shape.min)
      add(at, 'length', `${name} needs at least ${shape.min} ${unit}, got ${n}`);
    if (shape.max !== undefined && n > shape.max)
      add(at, 'length', `${name} allows at most ${shape.max} ${unit}, got ${n}`);
  };
  const checkRange = (name: string, shape: Shape, n: number, at: string) => {
    if (shape.min !== undefined && n < shape.min) add(at, 'range', `${name} is at least ${shape.min}, got ${n}`);
    if (shape.max !== undefined && n > shape.max) add(at, 'range', `${name} is at most ${shape.max}, got ${n}`);
  };

  check(shapeName, value, path, true);
  return problems;
}

/** A scalar that travelled as text (query string, XML, header), as the JSON value the validator expects. */
function fromText(shape: Shape | undefined, text: string): unknown {
  switch (shape?.type) {
    case 'integer':
    case 'long':
      return /^-?\d+$/.test(text) ? Number(text) : text;
    case 'float':
    case 'double':
      return text !== '' && !Number.isNaN(Number(text)) ? Number(text) : text;
    case 'boolean':
      return text === 'true' ? true : text === 'false' ? false : text;
    default:
      return text;
  }
}

// ------------------------------------------------------------------ vnd.amazon.eventstream

interface StreamMessage {
  /** Header values as the codec decoded them (strings for the `:`-headers). */
  headers: Record<string, unknown>;
  /** `:message-type`: event, exception or error. */
  messageType: string;
  /** `:event-type` or `:exception-type` (`:error-code` for error messages). */
  type: string;
  body: string;
  /** The body parsed as JSON; undefined when it is not JSON. */
  payload: unknown;
}

const codec = new EventStreamCodec(toUtf8, fromUtf8);

/** Splits a vnd.amazon.eventstream body into its messages (each frame's prelude and message CRCs are checked). */
function decodeEventStream(bytes: Uint8Array): { messages: StreamMessage[]; problems: Problem[] } {
  const messages: StreamMessage[] = [];
  const problems: Problem[] = [];
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let offset = 0;
  while (offset < bytes.length) {
    const at = `response.events[${messages.length}]`;
    if (bytes.length - offset < 4) {
      problems.push({
        path: at,
        kind: 'protocol',
        message: `${bytes.length - offset} trailing bytes after the last frame`,
      });
      break;
    }
    const length = view.getUint32(offset);
    if (length < 16 || offset + length > bytes.length) {
      problems.push({ path: at, kind: 'protocol', message: `frame of ${length} bytes, ${bytes.length - offset} left` });
      break;
    }
    try {
      const decoded = codec.decode(bytes.subarray(offset, offset + length));
      const headers: Record<string, unknown> = {};
      for (const [name, h] of Object.entries(decoded.headers)) headers[name] = h.value;
      const messageType = String(headers[':message-type'] ?? '');
      const typeHeader =
        messageType === 'event' ? ':event-type' : messageType === 'exception' ? ':exception-type' : ':error-code';
      const body = toUtf8(decoded.body);
      let payload: unknown;
      try {
        payload = body === '' ? undefined : JSON.parse(body);
      } catch {
        payload = undefined;
      }
      messages.push({ headers, messageType, type: String(headers[typeHeader] ?? ''), body, payload });
    } catch (err) {
      problems.push({ path: at, kind: 'protocol', message: `undecodable frame: ${String(err)}` });
      break;
    }
    offset += length;
  }
  return { messages, problems };
}

/** Each message against the event-stream union: events and exceptions must be its members, their payloads fit. */
function checkEventStream(
  model: ServiceModel,
  unionName: string,
  messages: StreamMessage[],
  path = 'response.events',
): Problem[] {
  const union = model.shapes[unionName];
  if (union?.eventstream !== true) return [{ path, kind: 'protocol', message: `${unionName} is not an event stream` }];
  const problems: Problem[] = [];
  for (const [i, m] of messages.entries()) {
    const at = `${path}[${i}](${m.type || m.messageType || '?'})`;
    const add = (kind: ProblemKind, message: string): void => {
      problems.push({ path: at, kind, message });
    };
    if (m.messageType !== 'event' && m.messageType !== 'exception') {
      const detail = m.messageType === 'error' ? ` (${m.type}: ${String(m.headers[':error-message'])})` : '';
      add('protocol', `:message-type ${show(m.messageType)}${detail} is neither event nor exception`);
      continue;
    }
    const ref = union.members?.[m.type];
    const target = ref === undefined ? undefined : model.shapes[ref.shape];
    const trait = m.messageType === 'event' ? 'event' : 'exception';
    if (ref === undefined || target === undefined || target[trait] !== true) {
      const known = Object.entries(union.members ?? {})
        .filter(([, r]) => model.shapes[r.shape]?.[trait] === true)
        .map(([k]) => k);
      add('unknown-member', `${unionName} has no ${trait} ${show(m.type)}; its ${trait}s: [${known.join(', ')}]`);
      continue;
    }
    if (m.body !== '' && m.headers[':content-type'] !== 'application/json') {
      add('protocol', `:content-type is ${show(m.headers[':content-type'])}, not application/json`);
    }
    if (m.body !== '' && m.payload === undefined) {
      add('type', `the payload is not JSON: ${show(m.body)}`);
      continue;
    }
    problems.push(...validateShape(model, ref.shape, m.payload ?? {}, { timestamps: 'epoch-seconds' }, at));
  }
  return problems;
}

// ------------------------------------------------------------------ XML (awsQuery responses)

interface XmlElement {
  name: string;
  children: XmlElement[];
  text: string;
}

const XML_ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };

function xmlText(s: string): string {
  return s.replace(/&(#x[0-9a-fA-F]+|#\d+|\w+);/g, (whole, e: string) => {
    if (e.startsWith('#x')) return String.fromCodePoint(Number.parseInt(e.slice(2), 16));
    if (e.startsWith('#')) return String.fromCodePoint(Number(e.slice(1)));
    return XML_ENTITIES[e] ?? whole;
  });
}

/** A small parser for the well-formed XML AWS's query protocol answers with (attributes are dropped). */
function parseXml(xml: string): XmlElement {
  const root: XmlElement = { name: '#document', children: [], text: '' };
  const stack: XmlElement[] = [root];
  const token =
    /<\?[\s\S]*?\?>|<!--[\s\S]*?-->|<!\[CDATA\[([\s\S]*?)\]\]>|<\/([^\s>]+)\s*>|<([^\s/>!?]+)[^>]*?(\/?)>|([^<]+)/g;
  for (const m of xml.matchAll(token)) {
    const current = stack.at(-1) as XmlElement;
    const [, cdata, close, open, selfClosing, text] = m;
    if (cdata !== undefined) current.text += cdata;
    else if (close !== undefined) {
      if (current.name !== close || stack.length < 2) throw new Error(`XML: </${close}> closes <${current.name}>`);
      stack.pop();
    } else if (open !== undefined) {
      const el: XmlElement = { name: open, children: [], text: '' };
      current.children.push(el);
      if (selfClosing !== '/') stack.push(el);
    } else if (text !== undefined) current.text += xmlText(text);
  }
  if (stack.length !== 1) throw new Error(`XML: <${stack.at(-1)?.name}> is never closed`);
  const [top, ...rest] = root.children;
  if (top === undefined || rest.length > 0) throw new Error('XML: expected exactly one root element');
  return top;
}

/** An element as the JSON value of `shapeName`; children the shape does not know keep their XML name. */
function xmlValue(model: ServiceModel, shapeName: string, el: XmlElement, at: string, problems: Problem[]): unknown {
  const shape = model.shapes[shapeName];
  if (shape?.type === 'structure' && shape.document !== true) {
    const out: Record<string, unknown> = {};
    const members = Object.entries(shape.members ?? {});
    for (const child of el.children) {
      const key = members.find(([k, r]) => (r.locationName ?? k) === child.name)?.[0];
      const name = key ?? child.name;
      if (Object.hasOwn(out, name))
        problems.push({ path: memberPath(at, name), kind: 'protocol', message: 'repeated' });
      const ref = key === undefined ? undefined : shape.members?.[key];
      out[name] =
        ref === undefined ? genericXml(child) : xmlValue(model, ref.shape, child, memberPath(at, name), problems);
    }
    return out;
  }
  if (shape?.type === 'list') {
    const item = shape.member?.locationName ?? 'member';
    return el.children.map((child, i) => {
      if (child.name !== item)
        problems.push({ path: `${at}[${i}]`, kind: 'protocol', message: `list item <${child.name}>, not <${item}>` });
      return xmlValue(model, shape.member?.shape ?? '', child, `${at}[${i}]`, problems);
    });
  }
  if (shape?.type === 'map') {
    const out: Record<string, unknown> = {};
    for (const entry of el.children) {
      const k = entry.children.find((c) => c.name === (shape.key?.locationName ?? 'key'))?.text ?? '';
      const v = entry.children.find((c) => c.name === (shape.value?.locationName ?? 'value'));
      out[k] = v === undefined ? undefined : xmlValue(model, shape.value?.shape ?? '', v, memberPath(at, k), problems);
    }
    return out;
  }
  if (el.children.length > 0) {
    problems.push({ path: at, kind: 'type', message: `${shapeName} is a ${shape?.type ?? '?'}, got child elements` });
    return genericXml(el);
  }
  return fromText(shape, el.text);
}

function genericXml(el: XmlElement): unknown {
  if (el.children.length === 0) return el.text;
  return Object.fromEntries(el.children.map((c) => [c.name, genericXml(c)]));
}

// ------------------------------------------------------------------ awsQuery request parameters

interface QueryEntry {
  keys: string[];
  value: string;
}

function groupBy(entries: QueryEntry[]): Map<string, QueryEntry[]> {
  const groups = new Map<string, QueryEntry[]>();
  for (const e of entries) {
    const [head = '', ...rest] = e.keys;
    groups.set(head, [...(groups.get(head) ?? []), { keys: rest, value: e.value }]);
  }
  return groups;
}

/** Flattened `A.member.1.B=v` parameters as the JSON value of `shapeName`; unknown names keep their own. */
function queryValue(
  model: ServiceModel,
  shapeName: string,
  entries: QueryEntry[],
  at: string,
  problems: Problem[],
): unknown {
  const shape = model.shapes[shapeName];
  const scalar = entries.length === 1 && entries[0]?.keys.length === 0 ? entries[0].value : undefined;
  if (shape?.type === 'structure' && shape.document !== true) {
    const out: Record<string, unknown> = {};
    const members = Object.entries(shape.members ?? {});
    for (const [name, sub] of groupBy(entries)) {
      const key = members.find(([k, r]) => (r.locationName ?? k) === name)?.[0];
      const ref = key === undefined ? undefined : shape.members?.[key];
      out[key ?? name] =
        ref === undefined
          ? sub.map((e) => e.value).join(',')
          : queryValue(model, ref.shape, sub, memberPath(at, key ?? name), problems);
    }
    return out;
  }
  if (shape?.type === 'list') {
    if (scalar === '') return [];
    const item = shape.member?.locationName ?? 'member';
    const groups = groupBy(entries);
    const items = groups.get(item) ?? [];
    if (groups.size !== (items.length > 0 ? 1 : 0)) {
      problems.push({ path: at, kind: 'protocol', message: `list parameters must be ${item}.N` });
    }
    return [...groupBy(items)]
      .sort(([a], [b]) => Number(a) - Number(b))
      .map(([, sub], i) => queryValue(model, shape.member?.shape ?? '', sub, `${at}[${i}]`, problems));
  }
  if (shape?.type === 'map') {
    const out: Record<string, unknown> = {};
    for (const [, sub] of groupBy(groupBy(entries).get('entry') ?? [])) {
      const parts = groupBy(sub);
      const k = parts.get(shape.key?.locationName ?? 'key')?.[0]?.value ?? '';
      const v = parts.get(shape.value?.locationName ?? 'value') ?? [];
      out[k] = queryValue(model, shape.value?.shape ?? '', v, memberPath(at, k), problems);
    }
    return out;
  }
  if (scalar === undefined) {
    problems.push({
      path: at,
      kind: 'type',
      message: `${shapeName} is a ${shape?.type ?? '?'}, got nested parameters`,
    });
    return undefined;
  }
  return fromText(shape, scalar);
}

// ------------------------------------------------------------------ HTTP exchanges

interface HttpRequestRecord {
  method: string;
  /** Still percent-encoded, as sent. */
  path: string;
  /** Decoded, as the SDK's HttpRequest holds it. */
  query: Record<string, string | string[] | null>;
  /** Lower-case names. */
  headers: Record<string, string>;
  body: Uint8Array;
}

interface HttpResponseRecord {
  status: number;
  /** Lower-case names. */
  headers: Record<string, string>;
  body: Uint8Array;
}

export interface HttpExchange {
  request: HttpRequestRecord;
  response: HttpResponseRecord;
}

export interface ExchangeReport {
  problems: Problem[];
  /** The operation's input as the request carried it (URI labels, query, headers and body members). */
  input: unknown;
  /** The output of a successful response (an event-stream payload member stays unset: see events). */
  output?: unknown;
  /** The messages of an event-stream response. */
  events?: StreamMessage[];
  /** A failed response: the error code it carried and the error shape of the operation it names. */
  error?: { code: string; shape?: string; message?: string };
}

export interface ExchangeOptions {
  /**
   * Error codes outside the operation's `errors` that AWS answers with anyway (authentication
   * and other common errors, which the models leave out), with their HTTP status.
   */
  unmodeledErrors?: Readonly<Record<string, number>>;
}

/** A raw exchange against an operation of the model: the request, the response or error, the event stream. */
export function checkExchange(
  model: ServiceModel,
  operationName: string,
  ex: HttpExchange,
  opts: ExchangeOptions = {},
): ExchangeReport {
  const op = model.operations[operationName];
  if (op === undefined) {
    const problem: Problem = {
      path: 'operation',
      kind: 'protocol',
      message: `${model.metadata.uid} has no ${operationName}`,
    };
    return { problems: [problem], input: undefined };
  }
  switch (model.metadata.protocol) {
    case 'rest-json':
      return restJson(model, op, ex, opts);
    case 'query':
      return awsQuery(model, op, ex, opts);
    default: {
      const message = `protocol ${model.metadata.protocol} is not supported by the checker`;
      return { problems: [{ path: 'operation', kind: 'protocol', message }], input: undefined };
    }
  }
}

function parseJson(bytes: Uint8Array, at: string, problems: Problem[]): unknown {
  const text = toUtf8(bytes);
  try {
    return JSON.parse(text);
  } catch {
    problems.push({ path: at, kind: 'type', message: `not JSON: ${show(text)}` });
    return undefined;
  }
}

function base64(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
}

/** A value bound to a header, query parameter or URI label, as JSON. */
function boundValue(model: ServiceModel, ref: ShapeRef, raw: string | string[]): unknown {
  const shape = model.shapes[ref.shape];
  if (shape?.type === 'list') {
    const items = Array.isArray(raw) ? raw : ref.location === 'header' ? raw.split(',').map((s) => s.trim()) : [raw];
    return items.map((s) => fromText(model.shapes[shape.member?.shape ?? ''], s));
  }
  return fromText(shape, Array.isArray(raw) ? raw.join(',') : raw);
}

function restJson(model: ServiceModel, op: Operation, ex: HttpExchange, opts: ExchangeOptions): ExchangeReport {
  const problems: Problem[] = [];
  const add = (path: string, kind: ProblemKind, message: string) => problems.push({ path, kind, message });
  const { request: req, response: res } = ex;

  // Request: method, URI labels, query, headers, body.
  if (req.method !== op.http.method)
    add('request.method', 'protocol', `${op.name} is ${op.http.method}, got ${req.method}`);
  const [template = '', fixedQuery = ''] = op.http.requestUri.split('?');
  const labels: string[] = [];
  const uri = new RegExp(
    `^${template
      .split(/(\{[^}]+\})/)
      .map((part) => {
        const label = /^\{([^}+]+)(\+?)\}$/.exec(part);
        if (label === null) return part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
        labels.push(label[1] ?? '');
        return label[2] === '+' ? '(.+)' : '([^/]+)';
      })
      .join('')}$`,
  );
  const match = uri.exec(req.path.split('?')[0] ?? '');
  if (match === null) add('request.path', 'protocol', `${req.path} does not match ${op.http.requestUri}`);
  const inputShape = op.input === undefined ? undefined : model.shapes[op.input.shape];
  const input: Record<string, unknown> = {};
  const knownQuery = new Set(new URLSearchParams(fixedQuery).keys());
  for (const [name, ref] of Object.entries(inputShape?.members ?? {})) {
    const wire = ref.locationName ?? name;
    if (ref.location === 'uri') {
      const raw = match?.[labels.indexOf(wire) + 1];
      if (raw !== undefined) input[name] = boundValue(model, ref, raw.split('/').map(decodeURIComponent).join('/'));
    } else if (ref.location === 'querystring') {
      knownQuery.add(wire);
      const raw = req.query[wire];
      if (raw !== undefined && raw !== null) input[name] = boundValue(model, ref, raw);
    } else if (ref.location === 'header') {
      const raw = req.headers[wire.toLowerCase()];
      if (raw !== undefined) input[name] = boundValue(model, ref, raw);
    } else if (ref.location === 'headers') {
      const prefix = wire.toLowerCase();
      const entries = Object.entries(req.headers).filter(([h]) => h.startsWith(prefix));
      if (entries.length > 0) input[name] = Object.fromEntries(entries.map(([h, v]) => [h.slice(prefix.length), v]));
    }
  }
  for (const key of Object.keys(req.query)) {
    if (!knownQuery.has(key)) add(`request.query.${key}`, 'unknown-member', `${op.name} has no query parameter ${key}`);
  }
  const payloadRef = inputShape?.payload === undefined ? undefined : inputShape.members?.[inputShape.payload];
  if (payloadRef !== undefined && inputShape?.payload !== undefined) {
    const target = model.shapes[payloadRef.shape];
    if (req.body.length > 0) {
      input[inputShape.payload] =
        target?.type === 'structure' ? parseJson(req.body, 'request.body', problems) : base64(req.body);
    }
  } else if (req.body.length > 0) {
    const body = parseJson(req.body, 'request.body', problems);
    if (isRecord(body)) {
      for (const [key, v] of Object.entries(body)) {
        if (inputShape?.members?.[key]?.location !== undefined) {
          add(
            `request.${key}`,
            'protocol',
            `${key} travels in the ${inputShape.members[key]?.location}, not in the body`,
          );
        } else input[key] = v;
      }
    } else if (body !== undefined) add('request.body', 'type', 'the body is not a JSON object');
  }
  if (op.input !== undefined) {
    problems.push(...validateShape(model, op.input.shape, input, { timestamps: 'epoch-seconds' }, 'request'));
  }

  // Response.
  const report: ExchangeReport = { problems, input };
  const contentType = res.headers['content-type'] ?? '';
  if (res.status >= 200 && res.status < 300) {
    const expected = op.http.responseCode ?? 200;
    if (res.status !== expected)
      add('response.status', 'protocol', `${op.name} answers ${expected}, got ${res.status}`);
    const outputShape = op.output === undefined ? undefined : model.shapes[op.output.shape];
    const output: Record<string, unknown> = {};
    for (const [name, ref] of Object.entries(outputShape?.members ?? {})) {
      const wire = (ref.locationName ?? name).toLowerCase();
      if (ref.location === 'header' && res.headers[wire] !== undefined) {
        output[name] = boundValue(model, ref, res.headers[wire] ?? '');
      } else if (ref.location === 'statusCode') output[name] = res.status;
    }
    const payload = outputShape?.payload;
    const payloadTarget =
      payload === undefined ? undefined : model.shapes[outputShape?.members?.[payload]?.shape ?? ''];
    if (payload !== undefined && payloadTarget?.eventstream === true) {
      if (!contentType.startsWith('application/vnd.amazon.eventstream')) {
        add(
          'response.headers.content-type',
          'protocol',
          `an event stream is application/vnd.amazon.eventstream, got ${contentType}`,
        );
      }
      const decoded = decodeEventStream(res.body);
      problems.push(...decoded.problems);
      problems.push(...checkEventStream(model, outputShape?.members?.[payload]?.shape ?? '', decoded.messages));
      report.events = decoded.messages;
    } else if (payload !== undefined) {
      if (res.body.length > 0) {
        output[payload] =
          payloadTarget?.type === 'structure' ? parseJson(res.body, 'response.body', problems) : base64(res.body);
      }
    } else {
      if (!contentType.startsWith('application/json')) {
        add('response.headers.content-type', 'protocol', `a restJson1 body is application/json, got ${contentType}`);
      }
      const body = res.body.length === 0 ? {} : parseJson(res.body, 'response.body', problems);
      if (isRecord(body)) {
        for (const [key, v] of Object.entries(body)) {
          if (outputShape?.members?.[key]?.location !== undefined) {
            add(
              `response.${key}`,
              'protocol',
              `${key} travels in the ${outputShape.members[key]?.location}, not in the body`,
            );
          } else output[key] = v;
        }
      } else if (body !== undefined) add('response.body', 'type', 'the body is not a JSON object');
    }
    if (op.output !== undefined) {
      problems.push(...validateShape(model, op.output.shape, output, { timestamps: 'epoch-seconds' }, 'response'));
    }
    report.output = output;
    return report;
  }

  // Errors: the code in x-amzn-ErrorType (`Code:namespace-uri`), else in the body's __type or code.
  const body = res.body.length === 0 ? {} : parseJson(res.body, 'response.body', problems);
  const header = res.headers['x-amzn-errortype'];
  const fromBody = isRecord(body) ? (body.__type ?? body.code) : undefined;
  const code = (header ?? (typeof fromBody === 'string' ? fromBody : '')).split(':')[0]?.split('#').pop() ?? '';
  if (header === undefined)
    add('response.headers.x-amzn-errortype', 'protocol', 'restJson1 errors carry x-amzn-ErrorType');
  const fields = isRecord(body) ? Object.fromEntries(Object.entries(body).filter(([k]) => k !== '__type')) : {};
  report.error = { code, ...(typeof fields.message === 'string' ? { message: fields.message } : {}) };
  checkError(model, op, code, res.status, fields, opts, problems, report, 'epoch-seconds');
  return report;
}

function checkError(
  model: ServiceModel,
  op: Operation,
  code: string,
  status: number,
  fields: Record<string, unknown>,
  opts: ExchangeOptions,
  problems: Problem[],
  report: ExchangeReport,
  timestamps: TimestampFormat,
): void {
  const modeled = (op.errors ?? []).map((ref) => ref.shape);
  const shapeName = modeled.find((name) => (model.shapes[name]?.error?.code ?? name) === code);
  if (shapeName !== undefined) {
    report.error = { ...(report.error ?? { code }), shape: shapeName };
    const expected = model.shapes[shapeName]?.error?.httpStatusCode;
    if (expected !== undefined && expected !== status) {
      problems.push({
        path: 'response.status',
        kind: 'protocol',
        message: `${shapeName} is HTTP ${expected}, got ${status}`,
      });
    }
    problems.push(...validateShape(model, shapeName, fields, { timestamps }, 'response.error'));
    return;
  }
  const common = opts.unmodeledErrors?.[code];
  if (common === undefined) {
    problems.push({
      path: 'response.error',
      kind: 'unknown-member',
      message: `${code || '(no code)'} (HTTP ${status}) is not one of ${op.name}'s errors [${modeled.join(', ')}]`,
    });
    return;
  }
  if (common !== status) {
    problems.push({ path: 'response.status', kind: 'protocol', message: `${code} is HTTP ${common}, got ${status}` });
  }
  if (typeof fields.message !== 'string') {
    problems.push({ path: 'response.error.message', kind: 'required', message: `${code} carries a message` });
  }
}

function awsQuery(model: ServiceModel, op: Operation, ex: HttpExchange, opts: ExchangeOptions): ExchangeReport {
  const problems: Problem[] = [];
  const add = (path: string, kind: ProblemKind, message: string) => problems.push({ path, kind, message });
  const { request: req, response: res } = ex;

  // Request: Action, Version and the input's flattened members, form-encoded in a POST body.
  if (req.method !== op.http.method)
    add('request.method', 'protocol', `${op.name} is ${op.http.method}, got ${req.method}`);
  const contentType = req.headers['content-type'] ?? '';
  if (!contentType.startsWith('application/x-www-form-urlencoded')) {
    add(
      'request.headers.content-type',
      'protocol',
      `awsQuery posts application/x-www-form-urlencoded, got ${contentType}`,
    );
  }
  const params = new URLSearchParams(toUtf8(req.body));
  if (params.get('Action') !== op.name)
    add('request.Action', 'protocol', `Action is ${op.name}, got ${params.get('Action')}`);
  const version = model.metadata.apiVersion;
  if (params.get('Version') !== version) {
    add('request.Version', 'protocol', `Version is ${version}, got ${params.get('Version')}`);
  }
  const entries = [...params]
    .filter(([k]) => k !== 'Action' && k !== 'Version')
    .map(([k, value]) => ({ keys: k.split('.'), value }));
  const input = op.input === undefined ? {} : queryValue(model, op.input.shape, entries, 'request', problems);
  if (op.input !== undefined)
    problems.push(...validateShape(model, op.input.shape, input, { timestamps: 'iso8601' }, 'request'));
  const report: ExchangeReport = { problems, input };

  let root: XmlElement;
  try {
    root = parseXml(toUtf8(res.body));
  } catch (err) {
    add('response.body', 'type', String(err));
    return report;
  }
  if (res.status >= 200 && res.status < 300) {
    // <OpResponse><OpResult>...</OpResult><ResponseMetadata><RequestId/></ResponseMetadata></OpResponse>
    if (root.name !== `${op.name}Response`)
      add('response', 'protocol', `the root is <${op.name}Response>, got <${root.name}>`);
    const wrapper = op.output?.resultWrapper;
    let result: XmlElement | undefined;
    for (const child of root.children) {
      if (child.name === wrapper) result = child;
      else if (child.name === 'ResponseMetadata') {
        if (!child.children.some((c) => c.name === 'RequestId' && c.text !== '')) {
          add('response.ResponseMetadata', 'required', 'ResponseMetadata carries the RequestId');
        }
      } else add(`response.<${child.name}>`, 'unknown-member', `<${root.name}> has no <${child.name}>`);
    }
    if (op.output !== undefined) {
      if (result === undefined) add('response', 'required', `<${root.name}> carries <${wrapper}>`);
      const output = result === undefined ? {} : xmlValue(model, op.output.shape, result, 'response', problems);
      problems.push(...validateShape(model, op.output.shape, output, { timestamps: 'iso8601' }, 'response'));
      report.output = output;
    }
    return report;
  }

  // <ErrorResponse><Error><Type>Sender</Type><Code/><Message/></Error><RequestId/></ErrorResponse>
  if (root.name !== 'ErrorResponse')
    add('response', 'protocol', `an awsQuery error is <ErrorResponse>, got <${root.name}>`);
  const error = root.children.find((c) => c.name === 'Error');
  if (!root.children.some((c) => c.name === 'RequestId' && c.text !== '')) {
    add('response.RequestId', 'required', '<ErrorResponse> carries the RequestId');
  }
  const part = (name: string) => error?.children.find((c) => c.name === name)?.text;
  const code = part('Code') ?? '';
  const type = part('Type');
  if (type !== 'Sender' && type !== 'Receiver')
    add('response.error.Type', 'enum', `Type is Sender or Receiver, got ${show(type)}`);
  const fields: Record<string, unknown> = {};
  const errorShape = (op.errors ?? []).map((r) => r.shape).find((n) => (model.shapes[n]?.error?.code ?? n) === code);
  const members = Object.keys(model.shapes[errorShape ?? '']?.members ?? { message: { shape: '' } });
  for (const child of error?.children ?? []) {
    if (child.name === 'Type' || child.name === 'Code') continue;
    const key = members.find((m) => m.toLowerCase() === child.name.toLowerCase()) ?? child.name;
    fields[key] = child.text;
  }
  report.error = { code, ...(typeof fields.message === 'string' ? { message: fields.message } : {}) };
  checkError(model, op, code, res.status, fields, opts, problems, report, 'iso8601');
  return report;
}
