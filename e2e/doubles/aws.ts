import { createHash, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import {
  createServer as createHttp1Server,
  type IncomingHttpHeaders,
  type OutgoingHttpHeaders,
  type ServerResponse,
} from 'node:http';
import { createServer as createHttp2Server, type Http2ServerResponse, constants as h2constants } from 'node:http2';
import { type AddressInfo, createServer as createNetServer, type Socket } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { Sha256 } from '@aws-crypto/sha256-js';
import { EventStreamCodec } from '@smithy/eventstream-codec';
import { SignatureV4 } from '@smithy/signature-v4';
import { fromUtf8, toUtf8 } from '@smithy/util-utf8';
import { anthropicAnswer, anthropicEvents, anthropicInputTokens, lastTextOf } from './aws-anthropic.js';
import { embeddingModel } from './aws-embeddings.js';

/**
 * A loopback stand-in for AWS STS (AssumeRole), Bedrock (ListFoundationModels, ListInferenceProfiles) and Bedrock
 * Runtime (Converse, ConverseStream, InvokeModel for the embedding models of aws-embeddings.ts) that the real AWS SDK
 * v3 clients talk to through an `endpoint` override. Beyond the basics it knows inference profiles (geographic,
 * `global.` where a model offers it, application profiles by id), LEGACY models, guardrails (ApplyGuardrail checked,
 * blocked words answered with stopReason guardrail_intervened) and prompt caching (a cachePoint's prefix written once,
 * then read, in the usage's cache token counts). e2e/no-cluster/aws-double-shapes.e2e.test.ts checks all of it against
 * botocore's service models. It speaks the real wire
 * protocols (awsQuery XML for STS, restJson1 for Bedrock, vnd.amazon.eventstream for streams) and checks what AWS
 * checks: every request's SigV4 signature, temporary-credential tokens and expiry, IAM actions, role trust and
 * external ids, model availability and Converse's conversation rules.
 *
 * One port serves HTTP/1.1 and cleartext HTTP/2: BedrockRuntimeClient's default handler is NodeHttp2Handler, which
 * on an http:// endpoint opens an h2c connection with prior knowledge, while the STS and Bedrock clients use
 * HTTP/1.1. Each connection is routed by its first bytes (the HTTP/2 preface starts with "PRI ").
 *
 * Prompt tokens: whitespace-separated words across every text block (system + messages; other blocks count 0).
 * Completion: `tok0 tok1 … tok<C-1>`, C = setCompletionTokens (default 8), capped by inferenceConfig.maxTokens
 * (stopReason "max_tokens") or cut before the first token equal to a stop sequence (stopReason "stop_sequence").
 */

export interface Principal {
  accessKeyId: string;
  secretAccessKey: string;
  arn: string;
  /** IAM actions allowed, e.g. ['bedrock:InvokeModel','bedrock:InvokeModelWithResponseStream','bedrock:ListFoundationModels','sts:AssumeRole']. `*` wildcards work as in IAM. */
  allow: string[];
  account: string;
}

export interface Role {
  arn: string;
  /** Principal ARNs its trust policy names. `arn:aws:iam::ACCOUNT:root` trusts every principal of that account. */
  trusted: string[];
  externalId?: string;
  /** Actions the role's permission policy grants (what its temporary credentials may do). */
  allow: string[];
  /** The role's MaxSessionDuration; AssumeRole's DurationSeconds may not exceed it. Default 3600. */
  maxSessionDurationSeconds?: number;
}

interface FoundationModel {
  modelId: string;
  providerName: string;
  modelName?: string;
  /** Default ['TEXT']. Converse only accepts models with TEXT output. */
  outputModalities?: string[];
  /** Default ['ON_DEMAND']. Bare ids need ON_DEMAND; `<geo>.` ids need INFERENCE_PROFILE. */
  inferenceTypesSupported?: string[];
  /** responseStreamingSupported; ConverseStream refuses models without it. Default: true when outputs include TEXT. */
  streaming?: boolean;
  /** Default TEXT and IMAGE for text models, TEXT for embedding models. Converse refuses image blocks without IMAGE. */
  inputModalities?: string[];
  /** modelLifecycle.status. Default ACTIVE. */
  lifecycle?: 'ACTIVE' | 'LEGACY';
  /** It also has a `global.` system-defined inference profile (routed to any commercial region). */
  global?: boolean;
  /** Converse caches the prompt up to a cachePoint block (prefixes of at least cacheMinTokens). */
  promptCaching?: boolean;
}

/** An application inference profile the account created, copying a foundation model in the region. */
interface ApplicationProfile {
  /** The 12-character id (ARN .../application-inference-profile/<id>). */
  id: string;
  name: string;
  modelId: string;
}

/** A guardrail the account defined: it intervenes when a user text contains a blocked word. */
interface Guardrail {
  id: string;
  /** Versions that exist; DRAFT always does. */
  versions?: string[];
  blockedWords: string[];
  blockedMessage: string;
  /** ApplyGuardrail's sensitive information filters: each match of a pattern is an entity of its type, anonymized. */
  piiEntities?: { type: string; pattern: RegExp }[];
  /** ApplyGuardrail's denied topics: a text with one of the words is about the topic (blocked). */
  topics?: { name: string; words: string[] }[];
}

export interface AwsDoubleOptions {
  principals: Principal[];
  roles?: Role[];
  /** Per region. */
  models: Record<string, FoundationModel[]>;
  /** Per region. */
  applicationProfiles?: Record<string, ApplicationProfile[]>;
  guardrails?: Guardrail[];
  /** The shortest prompt prefix a cachePoint caches (Claude 3.7 Sonnet's minimum). Default 1024. */
  cacheMinTokens?: number;
  /** Model ids the account has NOT enabled (invoke -> AccessDeniedException). */
  notEnabled?: string[];
  /** Model ids needing use-case details (invoke -> ValidationException). */
  needsUseCase?: string[];
  /**
   * Lifetime of issued temporary credentials. When set it overrides AssumeRole's DurationSeconds (so a test can
   * make credentials expire in well under STS's 900 s minimum; fractions allowed). Unset: DurationSeconds ?? 3600.
   */
  credentialTtlSeconds?: number;
}

interface AwsCall {
  service: 'sts' | 'bedrock';
  /** AssumeRole | ListFoundationModels | ListInferenceProfiles | Converse | ConverseStream | InvokeModel | Unknown (or STS's Action parameter as sent). */
  action: string;
  /** From the SigV4 credential scope ('' when the request carried none). */
  region: string;
  /** From the SigV4 credential scope ('' when the request carried none). */
  accessKeyId: string;
  status: number;
  /** A Claude call's (InvokeModel): the text of its last message, and the tool the double's Claude called, if any. */
  claude?: { lastText: string; toolUsed?: string };
}

export interface AwsDouble {
  /** http://127.0.0.1:PORT, the `endpoint` for all three clients. */
  url: string;
  /** Every request, in the order responses were decided. */
  calls: AwsCall[];
  /** Make the next N runtime calls that would otherwise succeed fail with ThrottlingException (HTTP 429). */
  throttle(n: number): void;
  /** Completion length (default 8). */
  setCompletionTokens(n: number): void;
  /**
   * The next N ConverseStream calls go wrong after their text deltas: `no-stop` ends the stream
   * there (no messageStop, no metadata), `no-usage` sends messageStop but no metadata,
   * `exception` sends a modelStreamErrorException frame (`:message-type: exception`, as Bedrock
   * does) and ends.
   */
  breakStreams(n: number, how: StreamBreak): void;
  /**
   * Spaces a ConverseStream's text deltas (and a streamed Claude InvokeModel's chunks) by this
   * many ms, as a model generating in real time does (0, the default: all at once).
   */
  paceStreams(ms: number): void;
  /** TCP connections accepted so far, and open now (HTTP/1 keep-alive and HTTP/2 sessions alike). */
  connections(): { accepted: number; open: number };
  /** Destroys open connections (HTTP/1 keep-alive and HTTP/2 sessions) too. */
  close(): Promise<void>;
}

type Service = AwsCall['service'];

type StreamBreak = 'no-stop' | 'no-usage' | 'exception' | keyof typeof STREAM_EXCEPTIONS;

/** The other exception frames of ConverseStreamOutput, as Bedrock sends them mid-stream. */
const STREAM_EXCEPTIONS = {
  throttling: ['throttlingException', 'Too many requests, please wait before trying again.'],
  unavailable: ['serviceUnavailableException', 'Bedrock is unable to process your request.'],
  internal: [
    'internalServerException',
    'The system encountered an unexpected error during processing. Try your request again.',
  ],
  validation: ['validationException', 'The model returned an invalid response for this request.'],
} as const;

/** Who signed a request: a long-term principal or a role session the double issued. */
interface Identity {
  arn: string;
  account: string;
  allow: string[];
}

interface TemporaryCredentials extends Identity {
  secretAccessKey: string;
  sessionToken: string;
  /** Epoch ms. */
  expiresAt: number;
}

/** Why authentication failed; each protocol names these differently (see AUTH_ERRORS). */
type AuthFailure = 'missing' | 'incomplete' | 'scope' | 'skew' | 'unknownKey' | 'expired' | 'signature';

interface Scope {
  accessKeyId: string;
  date: string;
  region: string;
  service: string;
}

interface ParsedAuthorization extends Scope {
  signedHeaders: string[];
  signature: string;
}

type AuthResult =
  | { ok: true; identity: Identity; region: string }
  | { ok: false; failure: AuthFailure; message?: string };

/** The parts of IncomingMessage / Http2ServerRequest the double reads. */
interface WireRequest extends AsyncIterable<unknown> {
  readonly method?: string | undefined;
  readonly url?: string | undefined;
  readonly headers: IncomingHttpHeaders;
}

/** The parts of ServerResponse / Http2ServerResponse the double writes, plus a protocol-specific hard abort. */
interface Wire {
  readonly headersSent: () => boolean;
  writeHead(status: number, headers: OutgoingHttpHeaders): void;
  write(chunk: Uint8Array): void;
  end(body?: string | Uint8Array): void;
  abort(): void;
}

interface Exchange {
  req: WireRequest;
  wire: Wire;
  method: string;
  /** Raw path as sent (still percent-encoded), which is what SigV4 canonicalises. */
  rawPath: string;
  rawQuery: string;
  body: Buffer;
  startedAt: number;
  requestId: string;
}

interface ConversePlan {
  promptTokens: number;
  maxTokens: number | undefined;
  stopSequences: string[];
  /** toolConfig: the tools by name with their input schema, and toolChoice. */
  tools?: {
    specs: Array<{ name: string; schema: Record<string, unknown> }>;
    choice: 'auto' | 'any' | { tool: string };
  };
}

type Rejection = { status: number; code: string; message: string };

const STS_NS = 'https://sts.amazonaws.com/doc/2011-06-15/';
const STS_VERSION = '2011-06-15';
/** AWS rejects SigV4 requests whose x-amz-date is more than 5 minutes away from its clock. */
const MAX_SKEW_MS = 5 * 60_000;
const DEFAULT_COMPLETION_TOKENS = 8;
const DEFAULT_MAX_SESSION_SECONDS = 3600;
/** HTTP/2 connection preface prefix; no HTTP/1 method starts with it. */
const H2_PREFACE = Buffer.from('PRI ');

/** Status and error code per failure, per protocol: STS (awsQuery) and Bedrock (Coral restJson1) name them apart. */
const AUTH_ERRORS: Record<AuthFailure, { status: number; sts: string; bedrock: string; message: string }> = {
  missing: {
    status: 403,
    sts: 'MissingAuthenticationToken',
    bedrock: 'MissingAuthenticationTokenException',
    message: 'Missing Authentication Token',
  },
  incomplete: {
    status: 400,
    sts: 'IncompleteSignature',
    bedrock: 'IncompleteSignatureException',
    message: "Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' parameters.",
  },
  scope: { status: 403, sts: 'SignatureDoesNotMatch', bedrock: 'InvalidSignatureException', message: '' },
  skew: { status: 403, sts: 'SignatureDoesNotMatch', bedrock: 'InvalidSignatureException', message: '' },
  unknownKey: {
    status: 403,
    sts: 'InvalidClientTokenId',
    bedrock: 'UnrecognizedClientException',
    message: 'The security token included in the request is invalid.',
  },
  expired: {
    status: 403,
    sts: 'ExpiredToken',
    bedrock: 'ExpiredTokenException',
    message: 'The security token included in the request is expired',
  },
  signature: {
    status: 403,
    sts: 'SignatureDoesNotMatch',
    bedrock: 'InvalidSignatureException',
    message:
      'The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.',
  },
};

/** Which regions each cross-region inference-profile prefix may be called from. */
const GEO_PREFIXES: Record<string, (region: string) => boolean> = {
  us: (r) => r.startsWith('us-') && !r.startsWith('us-gov-'),
  'us-gov': (r) => r.startsWith('us-gov-'),
  eu: (r) => r.startsWith('eu-'),
  apac: (r) => r.startsWith('ap-'),
  jp: (r) => r === 'ap-northeast-1' || r === 'ap-northeast-3',
  au: (r) => r === 'ap-southeast-2' || r === 'ap-southeast-4',
  ca: (r) => r.startsWith('ca-'),
  global: () => true,
};

const LIST_FILTERS: Record<string, readonly string[] | undefined> = {
  byOutputModality: ['TEXT', 'IMAGE', 'EMBEDDING'],
  byInferenceType: ['ON_DEMAND', 'PROVISIONED'],
  byCustomizationType: ['FINE_TUNING', 'CONTINUED_PRE_TRAINING', 'DISTILLATION'],
};

/** Bedrock's answer to a body that does not fit the operation's input shape. */
const MALFORMED = 'Malformed input request, please reformat your input and try again.';

const codec = new EventStreamCodec(toUtf8, fromUtf8);

export async function startAwsDouble(opts: AwsDoubleOptions): Promise<AwsDouble> {
  const principals = new Map(opts.principals.map((p) => [p.accessKeyId, p]));
  const roles = new Map((opts.roles ?? []).map((r) => [r.arn, r]));
  const issued = new Map<string, TemporaryCredentials>();
  const notEnabled = new Set(opts.notEnabled ?? []);
  const needsUseCase = new Set(opts.needsUseCase ?? []);
  const calls: AwsCall[] = [];
  const sockets = new Set<Socket>();
  let throttleRemaining = 0;
  /** Prompt prefixes cached by a cachePoint, by their text. */
  const promptCache = new Set<string>();
  let completionTokens = DEFAULT_COMPLETION_TOKENS;
  let breakRemaining = 0;
  let breakHow: StreamBreak = 'no-stop';
  let paceMs = 0;
  let accepted = 0;
  const pace = () => (paceMs > 0 ? delay(paceMs) : undefined);
  let port = 0;
  let closing: Promise<void> | undefined;

  const h1 = createHttp1Server((req, res) => void serve(req, http1Wire(res)));
  // Node's 5 s idle timeout would race the SDK's keep-alive pool (a request sent just as the server closes the
  // connection fails with ECONNRESET, which no AWS endpoint does within seconds); close() tears connections down.
  h1.keepAliveTimeout = 0;
  const h2 = createHttp2Server((req, res) => void serve(req, http2Wire(res)));
  // A client resetting its HTTP/2 session must not take the test process down.
  h2.on('sessionError', () => {});

  const front = createNetServer((socket) => {
    sockets.add(socket);
    accepted += 1;
    socket.once('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    routeConnection(socket, h1, h2);
  });

  async function serve(req: WireRequest, wire: Wire): Promise<void> {
    let ex: Exchange | undefined;
    // Latency is measured from arrival, as Bedrock's metrics.latencyMs is.
    const startedAt = Date.now();
    try {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer));
      const rawUrl = req.url ?? '/';
      const q = rawUrl.indexOf('?');
      ex = {
        req,
        wire,
        method: req.method ?? 'GET',
        rawPath: q < 0 ? rawUrl : rawUrl.slice(0, q),
        rawQuery: q < 0 ? '' : rawUrl.slice(q + 1),
        body: Buffer.concat(chunks),
        startedAt,
        requestId: randomUUID(),
      };
      await route(ex);
    } catch (err) {
      // A bug in the double must surface in the test that hit it, not hang it.
      try {
        if (ex === undefined || wire.headersSent()) return wire.abort();
        sendJson(ex, 500, { message: `aws double: ${String(err)}` }, { 'x-amzn-ErrorType': 'InternalServerException' });
      } catch {
        // The client is already gone; there is no one left to tell.
      }
    }
  }

  async function route(ex: Exchange): Promise<void> {
    if (ex.rawPath === '/') return sts(ex);
    if (ex.method === 'GET' && ex.rawPath === '/foundation-models') return listFoundationModels(ex);
    if (ex.method === 'GET' && ex.rawPath === '/inference-profiles') return listInferenceProfiles(ex);
    const apply = /^\/guardrail\/([^/]+)\/version\/([^/]+)\/apply$/.exec(ex.rawPath);
    if (ex.method === 'POST' && apply !== null) return applyGuardrail(ex, apply[1] ?? '', apply[2] ?? '');
    const invoke =
      /^\/model\/([^/]+)\/(converse|converse-stream|invoke|invoke-with-response-stream|count-tokens)$/.exec(ex.rawPath);
    if (ex.method === 'POST' && invoke !== null) {
      if (invoke[2] === 'invoke') return invokeModel(ex, invoke[1] ?? '', false);
      if (invoke[2] === 'invoke-with-response-stream') return invokeModel(ex, invoke[1] ?? '', true);
      if (invoke[2] === 'count-tokens') return countTokens(ex, invoke[1] ?? '');
      return converse(ex, invoke[1] ?? '', invoke[2] === 'converse-stream');
    }
    // AWS authenticates before it routes, so an unknown operation with a bad signature is still a signature error.
    const auth = await authenticate(ex, undefined);
    const failed = auth.ok ? undefined : bedrockAuthError(auth);
    const rejection = failed ?? { status: 404, code: 'UnknownOperationException', message: 'Unknown operation' };
    record('bedrock', 'Unknown', ex, rejection.status);
    sendBedrockError(ex, rejection);
  }

  // ---------------------------------------------------------------- SigV4

  /**
   * Verifies the request's SigV4 signature by signing it again: the request is rebuilt from what arrived (method,
   * raw path, query, only the headers the client listed in SignedHeaders, body) and handed to the SDK's own
   * SignatureV4 with the secret the double knows for that key and the client's x-amz-date as the signing date.
   */
  async function authenticate(ex: Exchange, expectedService: Service | undefined): Promise<AuthResult> {
    const header = headerValue(ex.req.headers, 'authorization');
    if (header === undefined) return { ok: false, failure: 'missing' };
    const auth = parseAuthorization(header);
    if (auth === undefined) return { ok: false, failure: 'incomplete' };
    const amzDate = headerValue(ex.req.headers, 'x-amz-date');
    const signingDate = amzDate === undefined ? undefined : parseAmzDate(amzDate);
    if (amzDate === undefined || signingDate === undefined) {
      return {
        ok: false,
        failure: 'incomplete',
        message: "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.",
      };
    }
    if (expectedService !== undefined && auth.service !== expectedService) {
      return {
        ok: false,
        failure: 'scope',
        message: `Credential should be scoped to correct service: '${expectedService}'. `,
      };
    }
    if (auth.date !== amzDate.slice(0, 8)) {
      return {
        ok: false,
        failure: 'scope',
        message: `Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '${auth.date}' != '${amzDate.slice(0, 8)}', from '${amzDate}'.`,
      };
    }
    const now = Date.now();
    if (Math.abs(now - signingDate.getTime()) > MAX_SKEW_MS) {
      const late = signingDate.getTime() < now;
      const bound = amzDateOf(new Date(late ? now - MAX_SKEW_MS : now + MAX_SKEW_MS));
      return {
        ok: false,
        failure: 'skew',
        message: late
          ? `Signature expired: ${amzDate} is now earlier than ${bound} (${amzDateOf(new Date(now))} - 5 min.)`
          : `Signature not yet current: ${amzDate} is still later than ${bound} (${amzDateOf(new Date(now))} + 5 min.)`,
      };
    }

    let secretAccessKey: string;
    let sessionToken: string | undefined;
    let identity: Identity;
    const principal = principals.get(auth.accessKeyId);
    const temporary = issued.get(auth.accessKeyId);
    if (principal !== undefined) {
      ({ secretAccessKey } = principal);
      identity = principal;
    } else if (temporary !== undefined) {
      // A session key is only valid together with the token it was issued with.
      const token = headerValue(ex.req.headers, 'x-amz-security-token');
      if (token === undefined || !sameString(token, temporary.sessionToken)) {
        return { ok: false, failure: 'unknownKey' };
      }
      if (now >= temporary.expiresAt) return { ok: false, failure: 'expired' };
      ({ secretAccessKey, sessionToken } = temporary);
      identity = temporary;
    } else {
      return { ok: false, failure: 'unknownKey' };
    }

    const headers: Record<string, string> = {};
    for (const name of auth.signedHeaders) {
      // HTTP/2 clients sign ':authority' in place of host; Node exposes pseudo-headers alongside the others.
      const value = headerValue(ex.req.headers, name);
      if (value === undefined) return { ok: false, failure: 'signature' };
      headers[name] = value;
    }
    const signsPayloadHash = auth.signedHeaders.includes('x-amz-content-sha256');
    if (signsPayloadHash && headers['x-amz-content-sha256'] !== sha256Hex(ex.body)) {
      // The signature covers the header, so a body that does not match it was altered after signing.
      return { ok: false, failure: 'signature' };
    }
    const signer = new SignatureV4({
      service: auth.service,
      region: auth.region,
      credentials: { accessKeyId: auth.accessKeyId, secretAccessKey, sessionToken },
      sha256: Sha256,
      // Mirror the client: add x-amz-content-sha256 only if it signed one (the SDK does, other signers may not).
      applyChecksum: signsPayloadHash,
    });
    const request: SignableRequest = {
      method: ex.method,
      protocol: 'http:',
      hostname: '127.0.0.1',
      port,
      path: ex.rawPath,
      query: parseQuery(ex.rawQuery),
      headers,
      body: ex.body.length > 0 ? ex.body : undefined,
    };
    const signed = await signer.sign(request, {
      signingDate,
      // Sign exactly the client's list, even a header the SDK would never sign by default.
      signableHeaders: new Set(auth.signedHeaders),
    });
    const expected = parseAuthorization(signed.headers.authorization ?? '');
    if (expected === undefined || !sameString(expected.signature, auth.signature)) {
      return { ok: false, failure: 'signature' };
    }
    return { ok: true, identity, region: auth.region };
  }

  // ---------------------------------------------------------------- STS (awsQuery)

  async function sts(ex: Exchange): Promise<void> {
    const params = new URLSearchParams(ex.rawQuery);
    const contentType = headerValue(ex.req.headers, 'content-type') ?? '';
    if (ex.method === 'POST' && contentType.startsWith('application/x-www-form-urlencoded')) {
      for (const [k, v] of new URLSearchParams(ex.body.toString('utf8'))) params.append(k, v);
    }
    const action = params.get('Action') ?? 'Unknown';
    const finish = (status: number, xml: string): void => {
      record('sts', action, ex, status);
      sendXml(ex, status, xml);
    };
    const fail = (status: number, code: string, message: string): void =>
      finish(
        status,
        `<ErrorResponse xmlns="${STS_NS}"><Error><Type>Sender</Type><Code>${code}</Code>` +
          `<Message>${xmlEscape(message)}</Message></Error><RequestId>${ex.requestId}</RequestId></ErrorResponse>`,
      );

    const auth = await authenticate(ex, 'sts');
    if (!auth.ok) {
      const e = AUTH_ERRORS[auth.failure];
      return fail(e.status, e.sts, auth.message ?? e.message);
    }
    if (action !== 'AssumeRole' || params.get('Version') !== STS_VERSION) {
      return fail(400, 'InvalidAction', `Could not find operation ${action} for version ${params.get('Version')}`);
    }

    const roleArn = params.get('RoleArn');
    const sessionName = params.get('RoleSessionName');
    const externalId = params.get('ExternalId');
    const durationParam = params.get('DurationSeconds');
    const invalid =
      (roleArn === null && nullViolation('roleArn')) ||
      (sessionName === null && nullViolation('roleSessionName')) ||
      (sessionName !== null && patternViolation(sessionName, 'roleSessionName', /^[\w+=,.@-]{2,64}$/)) ||
      (externalId !== null && patternViolation(externalId, 'externalId', /^[\w+=,.@:/-]{2,1224}$/)) ||
      (durationParam !== null && rangeViolation(durationParam, 'durationSeconds', 900, 43200));
    if (invalid || roleArn === null || sessionName === null) {
      return fail(400, 'ValidationError', invalid || 'invalid request');
    }

    const caller = auth.identity;
    const denied = `User: ${caller.arn} is not authorized to perform: sts:AssumeRole on resource: ${roleArn}`;
    if (!allows(caller.allow, 'sts:AssumeRole')) {
      return fail(403, 'AccessDenied', `${denied} because no identity-based policy allows the sts:AssumeRole action`);
    }
    // A missing role, an untrusting trust policy and a wrong external id look the same to the caller, as on AWS.
    const role = roles.get(roleArn);
    const rootOfCaller = `arn:aws:iam::${caller.account}:root`;
    const trusted = role !== undefined && (role.trusted.includes(caller.arn) || role.trusted.includes(rootOfCaller));
    if (role === undefined || !trusted || (role.externalId !== undefined && externalId !== role.externalId)) {
      return fail(403, 'AccessDenied', denied);
    }
    const duration = durationParam === null ? DEFAULT_MAX_SESSION_SECONDS : Number(durationParam);
    if (duration > (role.maxSessionDurationSeconds ?? DEFAULT_MAX_SESSION_SECONDS)) {
      return fail(
        400,
        'ValidationError',
        'The requested DurationSeconds exceeds the MaxSessionDuration set for this role.',
      );
    }

    const roleAccount = arnAccount(roleArn) ?? caller.account;
    const roleName = roleArn.slice(roleArn.lastIndexOf('/') + 1);
    const assumedArn = `arn:aws:sts::${roleAccount}:assumed-role/${roleName}/${sessionName}`;
    const expiresAt = Date.now() + (opts.credentialTtlSeconds ?? duration) * 1000;
    const creds: TemporaryCredentials = {
      arn: assumedArn,
      account: roleAccount,
      allow: role.allow,
      secretAccessKey: randomBytes(30).toString('base64'),
      sessionToken: `IQoJb3JpZ2luX2Vj${randomBytes(180).toString('base64')}`,
      expiresAt,
    };
    const accessKeyId = `ASIA${randomKeyChars(16)}`;
    issued.set(accessKeyId, creds);
    finish(
      200,
      `<AssumeRoleResponse xmlns="${STS_NS}"><AssumeRoleResult><Credentials>` +
        `<AccessKeyId>${accessKeyId}</AccessKeyId>` +
        `<SecretAccessKey>${xmlEscape(creds.secretAccessKey)}</SecretAccessKey>` +
        `<SessionToken>${xmlEscape(creds.sessionToken)}</SessionToken>` +
        // STS reports whole seconds; the double still expires at the exact instant, for sub-second test TTLs.
        `<Expiration>${new Date(expiresAt).toISOString().replace(/\.\d{3}Z$/, 'Z')}</Expiration>` +
        `</Credentials><AssumedRoleUser><AssumedRoleId>${roleId(roleArn)}:${xmlEscape(sessionName)}</AssumedRoleId>` +
        `<Arn>${xmlEscape(assumedArn)}</Arn></AssumedRoleUser></AssumeRoleResult>` +
        `<ResponseMetadata><RequestId>${ex.requestId}</RequestId></ResponseMetadata></AssumeRoleResponse>`,
    );
  }

  // ---------------------------------------------------------------- Bedrock control plane (restJson1)

  type Reply = (status: number, payload: unknown, rejection?: Rejection) => void;

  /**
   * A control-plane call, authenticated and allowed by IAM, with the reply that records it;
   * undefined when it was already answered with the rejection. `resource` is what the denial
   * names, for the actions IAM evaluates against one.
   */
  async function controlPlane(
    ex: Exchange,
    action: string,
    resource?: (region: string, account: string) => string,
  ): Promise<{ reply: Reply; identity: Identity; region: string } | undefined> {
    const reply: Reply = (status, payload, rejection) => {
      record('bedrock', action, ex, status);
      if (rejection !== undefined) sendBedrockError(ex, rejection);
      else sendJson(ex, status, payload);
    };
    const auth = await authenticate(ex, 'bedrock');
    if (!auth.ok) {
      const e = bedrockAuthError(auth);
      reply(e.status, undefined, e);
      return undefined;
    }
    const { identity, region } = auth;
    if (!allows(identity.allow, `bedrock:${action}`)) {
      const on = resource ? ` on resource: ${resource(region, identity.account)}` : '';
      const message = `User: ${identity.arn} is not authorized to perform: bedrock:${action}${on} because no identity-based policy allows the bedrock:${action} action`;
      reply(403, undefined, { status: 403, code: 'AccessDeniedException', message });
      return undefined;
    }
    return { reply, identity, region };
  }

  async function listFoundationModels(ex: Exchange): Promise<void> {
    const call = await controlPlane(ex, 'ListFoundationModels');
    if (call === undefined) return;
    const { reply, region } = call;
    const query = new URLSearchParams(ex.rawQuery);
    for (const [name, allowed] of Object.entries(LIST_FILTERS)) {
      const value = query.get(name);
      if (value !== null && allowed !== undefined && !allowed.includes(value)) {
        const message = `1 validation error detected: Value '${value}' at '${name}' failed to satisfy constraint: Member must satisfy enum value set: [${allowed.join(', ')}]`;
        return reply(400, undefined, { status: 400, code: 'ValidationException', message });
      }
    }
    const byProvider = query.get('byProvider');
    if (byProvider !== null && !/^[A-Za-z0-9- ]{1,63}$/.test(byProvider)) {
      const message = `1 validation error detected: Value '${byProvider}' at 'byProvider' failed to satisfy constraint: Member must satisfy regular expression pattern: [A-Za-z0-9- ]{1,63}`;
      return reply(400, undefined, { status: 400, code: 'ValidationException', message });
    }
    const byOutput = query.get('byOutputModality');
    const byInference = query.get('byInferenceType');
    const byCustomization = query.get('byCustomizationType');
    const summaries = (opts.models[region] ?? [])
      .filter((m) => byProvider === null || m.providerName.toLowerCase() === byProvider.toLowerCase())
      .filter((m) => byOutput === null || outputsOf(m).includes(byOutput))
      .filter((m) => byInference === null || inferenceTypesOf(m).includes(byInference))
      // The double's models support no customisation, so that filter always comes back empty.
      .filter(() => byCustomization === null)
      .map((m) => ({
        modelArn: foundationModelArn(region, m.modelId),
        modelId: m.modelId,
        modelName: m.modelName ?? m.modelId,
        providerName: m.providerName,
        inputModalities: inputsOf(m),
        outputModalities: outputsOf(m),
        responseStreamingSupported: streamingOf(m),
        customizationsSupported: [],
        inferenceTypesSupported: inferenceTypesOf(m),
        modelLifecycle: { status: m.lifecycle ?? 'ACTIVE' },
      }));
    reply(200, { modelSummaries: summaries });
  }

  /** The system-defined profiles callable from a region: each geography containing it, and global where offered. */
  function systemProfiles(region: string): Array<{ id: string; model: FoundationModel }> {
    const out: Array<{ id: string; model: FoundationModel }> = [];
    for (const m of opts.models[region] ?? []) {
      if (!inferenceTypesOf(m).includes('INFERENCE_PROFILE')) continue;
      for (const [geo, allows] of Object.entries(GEO_PREFIXES)) {
        if (geo === 'global' ? m.global === true : allows(region)) out.push({ id: `${geo}.${m.modelId}`, model: m });
      }
    }
    return out;
  }

  async function listInferenceProfiles(ex: Exchange): Promise<void> {
    const call = await controlPlane(
      ex,
      'ListInferenceProfiles',
      (region, account) => `arn:aws:bedrock:${region}:${account}:inference-profile/*`,
    );
    if (call === undefined) return;
    const { reply, identity, region } = call;
    const query = new URLSearchParams(ex.rawQuery);
    const type = query.get('type');
    if (type !== null && type !== 'SYSTEM_DEFINED' && type !== 'APPLICATION') {
      const message = `1 validation error detected: Value '${type}' at 'typeEquals' failed to satisfy constraint: Member must satisfy enum value set: [SYSTEM_DEFINED, APPLICATION]`;
      return reply(400, undefined, { status: 400, code: 'ValidationException', message });
    }
    const max = query.get('maxResults');
    const bad = max === null ? false : rangeViolation(max, 'maxResults', 1, 1000);
    if (bad) return reply(400, undefined, { status: 400, code: 'ValidationException', message: bad });
    const at = Number(query.get('nextToken') ?? '0');
    const now = new Date(0).toISOString();
    const all = [
      ...(type === 'APPLICATION'
        ? []
        : systemProfiles(region).map(({ id, model }) => ({
            inferenceProfileName: `${id.split('.')[0]?.toUpperCase()} ${model.modelName ?? model.modelId}`,
            createdAt: now,
            updatedAt: now,
            inferenceProfileArn: `arn:aws:bedrock:${region}:${identity.account}:inference-profile/${id}`,
            models: [{ modelArn: foundationModelArn(region, model.modelId) }],
            inferenceProfileId: id,
            status: 'ACTIVE',
            type: 'SYSTEM_DEFINED',
          }))),
      ...(type === 'SYSTEM_DEFINED'
        ? []
        : (opts.applicationProfiles?.[region] ?? []).map((p) => ({
            inferenceProfileName: p.name,
            createdAt: now,
            updatedAt: now,
            inferenceProfileArn: `arn:aws:bedrock:${region}:${identity.account}:application-inference-profile/${p.id}`,
            models: [{ modelArn: foundationModelArn(region, p.modelId) }],
            inferenceProfileId: p.id,
            status: 'ACTIVE',
            type: 'APPLICATION',
          }))),
    ];
    const size = max === null ? 1000 : Number(max);
    const page = all.slice(at, at + size);
    const next = at + size < all.length ? { nextToken: String(at + size) } : {};
    reply(200, { inferenceProfileSummaries: page, ...next });
  }

  // ---------------------------------------------------------------- InvokeModel (embedding models)

  async function invokeModel(ex: Exchange, encodedModelId: string, stream: boolean): Promise<void> {
    const action = stream ? 'InvokeModelWithResponseStream' : 'InvokeModel';
    const reject = (r: Rejection): void => {
      record('bedrock', action, ex, r.status);
      sendBedrockError(ex, r);
    };
    const validation = (message: string): void => reject({ status: 400, code: 'ValidationException', message });
    const auth = await authenticate(ex, 'bedrock');
    if (!auth.ok) return reject(bedrockAuthError(auth));
    const { identity, region } = auth;
    const named = authorisedTarget(
      encodedModelId,
      identity,
      region,
      stream ? 'bedrock:InvokeModelWithResponseStream' : 'bedrock:InvokeModel',
    );
    if ('code' in named) return reject(named);
    const { modelId, target } = named;
    if (target.model === undefined) return validation(target.problem ?? 'The provided model identifier is invalid.');
    const denied = notEnabledFor(target.model, modelId);
    if (denied) return reject(denied);
    const contentType = headerValue(ex.req.headers, 'content-type') ?? 'application/json';
    if (!contentType.startsWith('application/json')) {
      return validation(`The provided content type ${contentType} is not supported.`);
    }
    let body: unknown;
    try {
      body = JSON.parse(ex.body.toString('utf8'));
    } catch {
      return validation('Malformed input request, please reformat your input and try again.');
    }
    if (target.model.modelId.startsWith('anthropic.')) {
      // Claude: Anthropic's Messages body, answered whole or as Anthropic's events in chunks.
      const throttledClaude = takeThrottle();
      if (throttledClaude) return reject(throttledClaude);
      const answer = anthropicAnswer(body, modelId, completionTokens);
      if (typeof answer === 'string') return validation(answer);
      const used = (answer.message.content as Array<{ type?: string; name?: string }>).find(
        (b) => b.type === 'tool_use',
      );
      record('bedrock', action, ex, 200, {
        claude: {
          lastText: lastTextOf(isRecord(body) ? body.messages : undefined),
          ...(used?.name ? { toolUsed: used.name } : {}),
        },
      });
      if (!stream) {
        sendJson(ex, 200, answer.message, {
          'X-Amzn-Bedrock-Input-Token-Count': String(answer.inputTokens),
          'X-Amzn-Bedrock-Invocation-Latency': String(Date.now() - ex.startedAt),
        });
        return;
      }
      ex.wire.writeHead(200, {
        'Content-Type': 'application/vnd.amazon.eventstream',
        'x-amzn-RequestId': ex.requestId,
      });
      const events = anthropicEvents(answer, () => Date.now() - ex.startedAt);
      for (const e of events.slice(0, -1)) {
        if ((e as { type?: string }).type === 'content_block_delta') await pace();
        ex.wire.write(event('chunk', { bytes: Buffer.from(JSON.stringify(e)).toString('base64') }));
      }
      ex.wire.end(event('chunk', { bytes: Buffer.from(JSON.stringify(events.at(-1))).toString('base64') }));
      return;
    }
    if (stream) return validation('The model is unsupported for streaming.');
    const model = embeddingModel(target.model.modelId);
    // The double serves InvokeModel for its embedding and Claude models; other text models take Converse here.
    if (model === undefined) return validation(MALFORMED);
    const throttled = takeThrottle();
    if (throttled) return reject(throttled);
    const answer = model(body);
    if ('error' in answer) return validation(answer.error);
    record('bedrock', action, ex, 200);
    sendJson(ex, 200, answer.body, {
      'X-Amzn-Bedrock-Input-Token-Count': String(answer.inputTokens),
      'X-Amzn-Bedrock-Invocation-Latency': String(Date.now() - ex.startedAt),
    });
  }

  /** CountTokens of a Claude model's InvokeModel body (the double counts as it bills: a quarter of the JSON's length). */
  async function countTokens(ex: Exchange, encodedModelId: string): Promise<void> {
    const action = 'CountTokens';
    const reject = (r: Rejection): void => {
      record('bedrock', action, ex, r.status);
      sendBedrockError(ex, r);
    };
    const auth = await authenticate(ex, 'bedrock');
    if (!auth.ok) return reject(bedrockAuthError(auth));
    const named = authorisedTarget(encodedModelId, auth.identity, auth.region, 'bedrock:CountTokens');
    if ('code' in named) return reject(named);
    const { target, modelId: countedId } = named;
    if (!(target.model?.modelId ?? countedId).startsWith('anthropic.'))
      return reject({
        status: 400,
        code: 'ValidationException',
        message: "The provided model doesn't support counting tokens.",
      });
    let input: { invokeModel?: { body?: string } };
    try {
      input = (JSON.parse(ex.body.toString('utf8')) as { input?: typeof input }).input ?? {};
    } catch {
      return reject({ status: 400, code: 'SerializationException', message: 'Unable to parse request body as JSON.' });
    }
    let body: unknown;
    try {
      // The blob travels base64-encoded in restJson1.
      body = JSON.parse(Buffer.from(input.invokeModel?.body ?? '', 'base64').toString('utf8'));
    } catch {
      return reject({ status: 400, code: 'ValidationException', message: MALFORMED });
    }
    const checked = anthropicAnswer(body, countedId, 1);
    if (typeof checked === 'string') return reject({ status: 400, code: 'ValidationException', message: checked });
    record('bedrock', action, ex, 200);
    sendJson(ex, 200, { inputTokens: anthropicInputTokens(body as Record<string, unknown>) });
  }

  // ---------------------------------------------------------------- Bedrock Runtime (restJson1 + eventstream)

  async function converse(ex: Exchange, encodedModelId: string, stream: boolean): Promise<void> {
    const action = stream ? 'ConverseStream' : 'Converse';
    const reject = (r: Rejection): void => {
      record('bedrock', action, ex, r.status);
      sendBedrockError(ex, r);
    };
    const validation = (message: string): void => reject({ status: 400, code: 'ValidationException', message });

    const auth = await authenticate(ex, 'bedrock');
    if (!auth.ok) return reject(bedrockAuthError(auth));
    const { identity, region } = auth;

    let body: unknown;
    try {
      body = ex.body.length === 0 ? {} : JSON.parse(ex.body.toString('utf8'));
    } catch {
      return reject({ status: 400, code: 'SerializationException', message: 'Unable to parse request body as JSON.' });
    }

    const iamAction = stream ? 'bedrock:InvokeModelWithResponseStream' : 'bedrock:InvokeModel';
    const named = authorisedTarget(encodedModelId, identity, region, iamAction);
    if ('code' in named) return reject(named);
    const { modelId, target } = named;

    const plan = validateShape(body);
    if (typeof plan === 'string') return validation(plan);

    if (target.model === undefined) return validation(target.problem ?? 'The provided model identifier is invalid.');
    const model = target.model;
    const denied = notEnabledFor(model, modelId);
    if (denied) return reject(denied);
    if (needsUseCase.has(model.modelId) || needsUseCase.has(modelId)) {
      return validation(
        'Model use case details have not been submitted for this account. Fill out the Anthropic use case details form before using the model.',
      );
    }
    if (!inputsOf(model).includes('IMAGE') && hasImage(body)) {
      return validation(
        "This model doesn't support the image content block that you provided. Try again with a supported model.",
      );
    }
    if (!outputsOf(model).includes('TEXT')) {
      return validation(
        "This action doesn't support the model that you provided. Try again with a supported text or chat model.",
      );
    }
    if (stream && !streamingOf(model)) return validation('The model is unsupported for streaming.');

    const conversation = validateConversation(body);
    if (conversation !== undefined) return validation(conversation);

    const throttled = takeThrottle();
    if (throttled) return reject(throttled);

    const guard = guardrailOf(body, stream, region, identity);
    if (typeof guard === 'object' && 'rejection' in guard) return reject(guard.rejection);
    if (guard !== undefined && isRecord(body) && blockedBy(guard, body)) {
      // The guardrail's message replaces the model's answer; the prompt was still read.
      const usage = { inputTokens: plan.promptTokens, outputTokens: 0, totalTokens: plan.promptTokens };
      record('bedrock', action, ex, 200);
      const text = guard.blockedMessage;
      if (!stream) {
        sendJson(ex, 200, {
          output: { message: { role: 'assistant', content: [{ text }] } },
          stopReason: 'guardrail_intervened',
          usage,
          metrics: { latencyMs: Date.now() - ex.startedAt },
        });
        return;
      }
      ex.wire.writeHead(200, {
        'Content-Type': 'application/vnd.amazon.eventstream',
        'x-amzn-RequestId': ex.requestId,
      });
      ex.wire.write(event('messageStart', { role: 'assistant' }));
      ex.wire.write(event('contentBlockDelta', { contentBlockIndex: 0, delta: { text } }));
      ex.wire.write(event('contentBlockStop', { contentBlockIndex: 0 }));
      ex.wire.write(event('messageStop', { stopReason: 'guardrail_intervened' }));
      ex.wire.end(event('metadata', { usage, metrics: { latencyMs: Date.now() - ex.startedAt } }));
      return;
    }

    // Extended thinking (Anthropic): a signed reasoning block first; a tool-use loop must hand it back.
    const thought = isRecord(body) && thinkingOn(body) && model.modelId.startsWith('anthropic.') ? THOUGHT : undefined;
    if (thought !== undefined && isRecord(body)) {
      const problem = thinkingTurnProblem(body);
      if (problem !== undefined) return validation(problem);
    }
    const reasoningBlock = thought === undefined ? [] : [{ reasoningContent: { reasoningText: thought } }];
    const b = thought === undefined ? 0 : 1;
    const writeThought = () => {
      if (thought === undefined) return;
      ex.wire.write(
        event('contentBlockDelta', { contentBlockIndex: 0, delta: { reasoningContent: { text: thought.text } } }),
      );
      ex.wire.write(
        event('contentBlockDelta', {
          contentBlockIndex: 0,
          delta: { reasoningContent: { signature: thought.signature } },
        }),
      );
      ex.wire.write(event('contentBlockStop', { contentBlockIndex: 0 }));
    };

    const use = toolCall(plan, body);
    if (use) {
      const args = JSON.stringify(use.input);
      const toolUsage = { inputTokens: plan.promptTokens, outputTokens: 5, totalTokens: plan.promptTokens + 5 };
      record('bedrock', action, ex, 200);
      if (!stream) {
        sendJson(ex, 200, {
          output: { message: { role: 'assistant', content: [...reasoningBlock, { toolUse: use }] } },
          stopReason: 'tool_use',
          usage: toolUsage,
          metrics: { latencyMs: Date.now() - ex.startedAt },
        });
        return;
      }
      ex.wire.writeHead(200, {
        'Content-Type': 'application/vnd.amazon.eventstream',
        'x-amzn-RequestId': ex.requestId,
      });
      ex.wire.write(event('messageStart', { role: 'assistant' }));
      writeThought();
      ex.wire.write(
        event('contentBlockStart', {
          contentBlockIndex: b,
          start: { toolUse: { toolUseId: use.toolUseId, name: use.name } },
        }),
      );
      // The input as JSON text in pieces, as Bedrock streams it.
      const cut = Math.ceil(args.length / 2);
      for (const piece of [args.slice(0, cut), args.slice(cut)]) {
        if (piece)
          ex.wire.write(event('contentBlockDelta', { contentBlockIndex: b, delta: { toolUse: { input: piece } } }));
      }
      ex.wire.write(event('contentBlockStop', { contentBlockIndex: b }));
      ex.wire.write(event('messageStop', { stopReason: 'tool_use' }));
      ex.wire.end(event('metadata', { usage: toolUsage, metrics: { latencyMs: Date.now() - ex.startedAt } }));
      return;
    }
    const { tokens, stopReason } = complete(completionTokens, plan);
    // A prompt prefix up to a cachePoint is written to the cache once, then read from it.
    const prefix = model.promptCaching && isRecord(body) ? cachedPrefix(body) : undefined;
    const cache =
      prefix !== undefined && prefix.tokens >= (opts.cacheMinTokens ?? 1024)
        ? promptCache.has(prefix.key)
          ? { cacheReadInputTokens: prefix.tokens }
          : { cacheWriteInputTokens: prefix.tokens }
        : {};
    if (prefix !== undefined) promptCache.add(prefix.key);
    const cached = Object.keys(cache).length > 0 ? (prefix?.tokens ?? 0) : 0;
    const usage = {
      inputTokens: plan.promptTokens - cached,
      outputTokens: tokens.length,
      totalTokens: plan.promptTokens + tokens.length,
      ...cache,
    };
    record('bedrock', action, ex, 200);
    if (!stream) {
      sendJson(ex, 200, {
        output: { message: { role: 'assistant', content: [...reasoningBlock, { text: tokens.join(' ') }] } },
        stopReason,
        usage,
        metrics: { latencyMs: Date.now() - ex.startedAt },
      });
      return;
    }
    ex.wire.writeHead(200, {
      'Content-Type': 'application/vnd.amazon.eventstream',
      'x-amzn-RequestId': ex.requestId,
    });
    ex.wire.write(event('messageStart', { role: 'assistant' }));
    writeThought();
    for (const [i, tok] of tokens.entries()) {
      if (i > 0) await pace();
      // Every token but the last carries its separating space, so the deltas concatenate to Converse's text.
      const text = i < tokens.length - 1 ? `${tok} ` : tok;
      ex.wire.write(event('contentBlockDelta', { contentBlockIndex: b, delta: { text } }));
    }
    if (breakRemaining > 0) {
      breakRemaining -= 1;
      if (breakHow === 'no-stop') return void ex.wire.end();
      if (breakHow === 'exception') {
        return void ex.wire.end(
          exceptionFrame('modelStreamErrorException', {
            message: 'The model stopped unexpectedly.',
            originalStatusCode: 500,
          }),
        );
      }
      if (breakHow !== 'no-usage') {
        const [type, message] = STREAM_EXCEPTIONS[breakHow];
        return void ex.wire.end(exceptionFrame(type, { message }));
      }
      ex.wire.write(event('contentBlockStop', { contentBlockIndex: b }));
      return void ex.wire.end(event('messageStop', { stopReason }));
    }
    ex.wire.write(event('contentBlockStop', { contentBlockIndex: b }));
    ex.wire.write(event('messageStop', { stopReason }));
    ex.wire.end(event('metadata', { usage, metrics: { latencyMs: Date.now() - ex.startedAt } }));
  }

  /**
   * ApplyGuardrail: the guardrail at that version (IAM first, then that it exists), its policies
   * applied to every text block - blocked words (wordPolicy.customWords, BLOCKED), denied topics
   * (topicPolicy, BLOCKED), sensitive information (piiEntities, ANONYMIZED: the output carries
   * {TYPE} in its place) - and GUARDRAIL_INTERVENED with the blocked message or the anonymized
   * text where any did, NONE otherwise. Usage counts text units of 1,000 characters per policy.
   */
  async function applyGuardrail(ex: Exchange, encodedId: string, version: string): Promise<void> {
    const reject = (r: Rejection): void => {
      record('bedrock', 'ApplyGuardrail', ex, r.status);
      sendBedrockError(ex, r);
    };
    const auth = await authenticate(ex, 'bedrock');
    if (!auth.ok) return reject(bedrockAuthError(auth));
    let body: unknown;
    try {
      body = ex.body.length === 0 ? {} : JSON.parse(ex.body.toString('utf8'));
    } catch {
      return reject({ status: 400, code: 'SerializationException', message: 'Unable to parse request body as JSON.' });
    }
    const config = {
      guardrailIdentifier: decodeURIComponent(encodedId),
      guardrailVersion: decodeURIComponent(version),
    };
    const guard = guardrailOf({ guardrailConfig: config }, false, auth.region, auth.identity);
    if (guard === undefined) return reject({ status: 400, code: 'ValidationException', message: MALFORMED });
    if ('rejection' in guard) {
      const r = guard.rejection;
      // ApplyGuardrail tells a guardrail it cannot find as ResourceNotFoundException.
      return reject(
        r.status === 400 && /does not exist/.test(r.message)
          ? { ...r, status: 404, code: 'ResourceNotFoundException' }
          : r,
      );
    }
    const b = isRecord(body) ? body : {};
    if (b.source !== 'INPUT' && b.source !== 'OUTPUT')
      return reject({ status: 400, code: 'ValidationException', message: MALFORMED });
    const blocks = Array.isArray(b.content) ? b.content : [];
    const texts = blocks.map((c) =>
      isRecord(c) && isRecord(c.text) && typeof c.text.text === 'string' ? c.text.text : undefined,
    );
    if (texts.length === 0 || texts.some((t) => t === undefined))
      return reject({ status: 400, code: 'ValidationException', message: MALFORMED });
    record('bedrock', 'ApplyGuardrail', ex, 200);
    sendJson(ex, 200, appliedGuardrail(guard, texts as string[]));
  }

  /**
   * The guardrail a Converse body names, checked as Bedrock does: its config's shape, that it exists at that
   * version, and that the caller may bedrock:ApplyGuardrail on it.
   */
  function guardrailOf(
    body: unknown,
    stream: boolean,
    region: string,
    identity: Identity,
  ): Guardrail | { rejection: Rejection } | undefined {
    const cfg = isRecord(body) ? body.guardrailConfig : undefined;
    if (cfg === undefined) return undefined;
    const invalid = (message: string) => ({ rejection: { status: 400, code: 'ValidationException', message } });
    if (!isRecord(cfg) || typeof cfg.guardrailIdentifier !== 'string' || typeof cfg.guardrailVersion !== 'string') {
      return invalid(MALFORMED);
    }
    const allowedKeys = [
      'guardrailIdentifier',
      'guardrailVersion',
      'trace',
      ...(stream ? ['streamProcessingMode'] : []),
    ];
    const extra = Object.keys(cfg).find((k) => !allowedKeys.includes(k));
    if (extra !== undefined) return invalid(MALFORMED);
    if (!/^(([1-9][0-9]{0,7})|(DRAFT))$/.test(cfg.guardrailVersion)) {
      return invalid(
        `1 validation error detected: Value '${cfg.guardrailVersion}' at 'guardrailConfig.guardrailVersion' failed to satisfy constraint: Member must satisfy regular expression pattern: (([1-9][0-9]{0,7})|(DRAFT))`,
      );
    }
    if (cfg.trace !== undefined && !['enabled', 'disabled', 'enabled_full'].includes(String(cfg.trace))) {
      return invalid(
        `1 validation error detected: Value '${String(cfg.trace)}' at 'guardrailConfig.trace' failed to satisfy constraint: Member must satisfy enum value set: [enabled, disabled, enabled_full]`,
      );
    }
    const id = cfg.guardrailIdentifier.replace(/^arn:aws[\w-]*:bedrock:[\w-]+:\d{12}:guardrail\//, '');
    const resourceArn = `arn:aws:bedrock:${region}:${identity.account}:guardrail/${id}`;
    if (!allows(identity.allow, 'bedrock:ApplyGuardrail')) {
      return {
        rejection: {
          status: 403,
          code: 'AccessDeniedException',
          message: `User: ${identity.arn} is not authorized to perform: bedrock:ApplyGuardrail on resource: ${resourceArn} because no identity-based policy allows the bedrock:ApplyGuardrail action`,
        },
      };
    }
    const guardrail = (opts.guardrails ?? []).find((g) => g.id === id);
    const version = cfg.guardrailVersion;
    if (guardrail === undefined || (version !== 'DRAFT' && !(guardrail.versions ?? []).includes(version))) {
      return invalid('The guardrail identifier or version provided in the request does not exist.');
    }
    return guardrail;
  }

  /**
   * A runtime path's model id, decoded, with the model it names, once IAM allows `iamAction` on
   * the resource the id names (IAM authorises before Bedrock looks the model up); else the rejection.
   */
  function authorisedTarget(
    encodedModelId: string,
    identity: Identity,
    region: string,
    iamAction: string,
  ): { modelId: string; target: ReturnType<typeof resolveTarget> } | Rejection {
    let modelId: string;
    try {
      modelId = decodeURIComponent(encodedModelId);
    } catch {
      return { status: 400, code: 'ValidationException', message: 'The provided model identifier is invalid.' };
    }
    const target = resolveTarget(region, identity.account, modelId);
    if (!allows(identity.allow, iamAction)) {
      return {
        status: 403,
        code: 'AccessDeniedException',
        message: `User: ${identity.arn} is not authorized to perform: ${iamAction} on resource: ${target.resourceArn} because no identity-based policy allows the ${iamAction} action`,
      };
    }
    return { modelId, target };
  }

  /** The account has not enabled the model (by its id, or by the id the caller sent). */
  function notEnabledFor(model: FoundationModel, modelId: string): Rejection | undefined {
    if (!notEnabled.has(model.modelId) && !notEnabled.has(modelId)) return undefined;
    return {
      status: 403,
      code: 'AccessDeniedException',
      message: "You don't have access to the model with the specified model ID.",
    };
  }

  /** One of the throttled calls throttle(n) asked for, if any are left. */
  function takeThrottle(): Rejection | undefined {
    if (throttleRemaining <= 0) return undefined;
    throttleRemaining -= 1;
    return { status: 429, code: 'ThrottlingException', message: 'Too many requests, please wait before trying again.' };
  }

  /** The model a runtime id names in this region, and the ARN IAM would evaluate for it. */
  function resolveTarget(
    region: string,
    account: string,
    id: string,
  ): { resourceArn: string; model?: FoundationModel; problem?: string } {
    let ref = id;
    let kind: 'foundation-model' | 'inference-profile' | 'application-inference-profile' | undefined;
    const arn =
      /^arn:aws[\w-]*:bedrock:([\w-]+):(\d*):(foundation-model|inference-profile|application-inference-profile)\/(.+)$/.exec(
        id,
      );
    if (arn !== null) {
      if (arn[1] !== region) return { resourceArn: id };
      kind = arn[3] as typeof kind;
      ref = arn[4] ?? '';
    }
    const models = opts.models[region] ?? [];
    const application = (opts.applicationProfiles?.[region] ?? []).find((p) => p.id === ref);
    if (application !== undefined && (kind === undefined || kind === 'application-inference-profile')) {
      return {
        resourceArn: `arn:aws:bedrock:${region}:${account}:application-inference-profile/${ref}`,
        model: models.find((m) => m.modelId === application.modelId),
      };
    }
    if (kind === 'application-inference-profile') return { resourceArn: id };
    const geo = /^([a-z]+(?:-gov)?)\.(.+)$/.exec(ref);
    const geoAllows = geo === null ? undefined : GEO_PREFIXES[geo[1] ?? ''];
    if (geo !== null && geoAllows !== undefined && kind !== 'foundation-model') {
      const resourceArn = `arn:aws:bedrock:${region}:${account}:inference-profile/${ref}`;
      const model = models.find((m) => m.modelId === geo[2]);
      const offered = geo[1] === 'global' ? model?.global === true : geoAllows(region);
      const usable = model !== undefined && offered && inferenceTypesOf(model).includes('INFERENCE_PROFILE');
      return usable ? { resourceArn, model } : { resourceArn };
    }
    const resourceArn = foundationModelArn(region, ref);
    const model = kind === 'inference-profile' ? undefined : models.find((m) => m.modelId === ref);
    if (model === undefined) return { resourceArn };
    if (!inferenceTypesOf(model).includes('ON_DEMAND')) {
      return {
        resourceArn,
        problem: `Invocation of model ID ${ref} with on-demand throughput isn't supported. Retry your request with the ID or ARN of an inference profile that contains this model.`,
      };
    }
    return { resourceArn, model };
  }

  function bedrockAuthError(auth: { failure: AuthFailure; message?: string }): Rejection {
    const e = AUTH_ERRORS[auth.failure];
    return { status: e.status, code: e.bedrock, message: auth.message ?? e.message };
  }

  function record(service: Service, action: string, ex: Exchange, status: number, extra: Partial<AwsCall> = {}): void {
    const scope = parseAuthorization(headerValue(ex.req.headers, 'authorization') ?? '');
    calls.push({
      service,
      action,
      region: scope?.region ?? '',
      accessKeyId: scope?.accessKeyId ?? '',
      status,
      ...extra,
    });
  }

  await new Promise<void>((resolve, reject) => {
    front.once('error', reject);
    front.listen({ port: 0, host: '127.0.0.1', backlog: 4096 }, () => {
      front.off('error', reject);
      resolve();
    });
  });
  port = (front.address() as AddressInfo).port;

  return {
    url: `http://127.0.0.1:${port}`,
    calls,
    throttle(n: number): void {
      if (!Number.isInteger(n) || n < 0) throw new Error(`throttle: expected a non-negative integer, got ${n}`);
      throttleRemaining = n;
    },
    setCompletionTokens(n: number): void {
      if (!Number.isInteger(n) || n < 0)
        throw new Error(`setCompletionTokens: expected a non-negative integer, got ${n}`);
      completionTokens = n;
    },
    breakStreams(n: number, how: StreamBreak): void {
      if (!Number.isInteger(n) || n < 0) throw new Error(`breakStreams: expected a non-negative integer, got ${n}`);
      breakRemaining = n;
      breakHow = how;
    },
    paceStreams(ms: number): void {
      if (!Number.isFinite(ms) || ms < 0) throw new Error(`paceStreams: expected ms >= 0, got ${ms}`);
      paceMs = ms;
    },
    connections: () => ({ accepted, open: sockets.size }),
    close(): Promise<void> {
      closing ??= new Promise<void>((resolve, reject) => {
        front.close((err) => (err ? reject(err) : resolve()));
        // Keep-alive sockets and HTTP/2 sessions would otherwise hold close() open until the client lets go.
        for (const s of sockets) s.destroy();
      });
      return closing;
    },
  };
}

// ------------------------------------------------------------------ connection routing

/**
 * Reads just enough of a new connection to tell HTTP/2 (prior knowledge) from HTTP/1.1, puts the bytes back and
 * hands the socket to the matching server. Both servers pick up data already buffered on the socket.
 */
function routeConnection(
  socket: Socket,
  h1: { emit(event: 'connection', socket: Socket): boolean },
  h2: { emit(event: 'connection', socket: Socket): boolean },
): void {
  const onReadable = (): void => {
    const head: Buffer | null = socket.read();
    if (head === null) return;
    socket.off('readable', onReadable);
    socket.unshift(head);
    // Fewer than 4 bytes that could still be the preface: wait for more.
    if (head.length < H2_PREFACE.length && H2_PREFACE.subarray(0, head.length).equals(head)) {
      socket.on('readable', onReadable);
      return;
    }
    const isH2 = head.subarray(0, H2_PREFACE.length).equals(H2_PREFACE);
    (isH2 ? h2 : h1).emit('connection', socket);
  };
  socket.on('readable', onReadable);
}

function http1Wire(res: ServerResponse): Wire {
  return {
    headersSent: () => res.headersSent,
    writeHead: (status, headers) => void res.writeHead(status, headers),
    write: (chunk) => void res.write(chunk),
    end: (body) => void (body === undefined ? res.end() : res.end(body)),
    abort: () => void res.destroy(),
  };
}

function http2Wire(res: Http2ServerResponse): Wire {
  return {
    headersSent: () => res.headersSent,
    // HTTP/2 header names are lower case on the wire (RFC 9113 §8.2.1).
    writeHead: (status, headers) =>
      void res.writeHead(status, Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]))),
    write: (chunk) => void res.write(chunk),
    end: (body) => void (body === undefined ? res.end() : res.end(body)),
    abort: () => void res.stream.close(h2constants.NGHTTP2_INTERNAL_ERROR),
  };
}

// ------------------------------------------------------------------ request validation and generation

/** Input-shape checks Bedrock runs before looking at the model (the `1 validation error detected` family). */
function validateShape(body: unknown): ConversePlan | string {
  if (!isRecord(body)) return MALFORMED;
  const cfg = body.inferenceConfig;
  let maxTokens: number | undefined;
  let stopSequences: string[] = [];
  if (cfg !== undefined) {
    if (!isRecord(cfg)) return MALFORMED;
    if (cfg.maxTokens !== undefined) {
      if (typeof cfg.maxTokens !== 'number' || !Number.isInteger(cfg.maxTokens) || cfg.maxTokens < 1) {
        return `1 validation error detected: Value '${String(cfg.maxTokens)}' at 'inferenceConfig.maxTokens' failed to satisfy constraint: Member must have value greater than or equal to 1`;
      }
      maxTokens = cfg.maxTokens;
    }
    for (const name of ['temperature', 'topP'] as const) {
      const v = cfg[name];
      if (v !== undefined && (typeof v !== 'number' || v < 0 || v > 1)) {
        return `1 validation error detected: Value '${String(v)}' at 'inferenceConfig.${name}' failed to satisfy constraint: Member must have value ${typeof v === 'number' && v > 1 ? 'less than or equal to 1' : 'greater than or equal to 0'}`;
      }
    }
    if (cfg.stopSequences !== undefined) {
      if (!Array.isArray(cfg.stopSequences) || !cfg.stopSequences.every((s) => typeof s === 'string')) {
        return MALFORMED;
      }
      stopSequences = cfg.stopSequences;
    }
  }
  if (body.additionalModelRequestFields !== undefined && !isRecord(body.additionalModelRequestFields)) {
    return MALFORMED;
  }
  let tools: ConversePlan['tools'];
  if (body.toolConfig !== undefined) {
    const tc = body.toolConfig;
    if (!isRecord(tc) || !Array.isArray(tc.tools)) return MALFORMED;
    const specs: Array<{ name: string; schema: Record<string, unknown> }> = [];
    for (const t of tc.tools) {
      const spec = isRecord(t) ? t.toolSpec : undefined;
      if (
        !isRecord(spec) ||
        typeof spec.name !== 'string' ||
        !isRecord(spec.inputSchema) ||
        !isRecord(spec.inputSchema.json)
      ) {
        return MALFORMED;
      }
      // ToolSpecification.name in botocore: pattern [a-zA-Z0-9_-]+, length 1-64.
      if (!/^[a-zA-Z0-9_-]{1,64}$/.test(spec.name)) {
        return `1 validation error detected: Value '${spec.name}' at 'toolConfig.tools.1.member.toolSpec.name' failed to satisfy constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_-]+`;
      }
      specs.push({ name: spec.name, schema: spec.inputSchema.json });
    }
    if (specs.length === 0) {
      return "1 validation error detected: Value '[]' at 'toolConfig.tools' failed to satisfy constraint: Member must have length greater than or equal to 1";
    }
    let choice: 'auto' | 'any' | { tool: string } = 'auto';
    if (tc.toolChoice !== undefined) {
      const c = tc.toolChoice;
      if (!isRecord(c)) return MALFORMED;
      if (isRecord(c.any)) choice = 'any';
      else if (isRecord(c.tool) && typeof c.tool.name === 'string') {
        const name = c.tool.name;
        if (!specs.some((t) => t.name === name)) {
          return 'The tool specified in toolChoice is not defined in the toolConfig.';
        }
        choice = { tool: name };
      } else if (!isRecord(c.auto)) return MALFORMED;
    }
    tools = { specs, choice };
  }
  if (body.messages !== undefined && !Array.isArray(body.messages)) return MALFORMED;
  const messages: unknown[] = Array.isArray(body.messages) ? body.messages : [];
  const blockLists = [body.system, ...messages.map((m) => (isRecord(m) ? m.content : undefined))];
  let promptTokens = 0;
  for (const blocks of blockLists) {
    if (blocks === undefined) continue;
    if (!Array.isArray(blocks)) return MALFORMED;
    for (const block of blocks) {
      if (!isRecord(block) || (block.text !== undefined && typeof block.text !== 'string')) return MALFORMED;
      if (typeof block.text === 'string') promptTokens += countWords(block.text);
      if (block.toolUse !== undefined) {
        const u = block.toolUse;
        if (!isRecord(u) || typeof u.toolUseId !== 'string' || typeof u.name !== 'string' || !isRecord(u.input)) {
          return MALFORMED;
        }
        promptTokens += countWords(JSON.stringify(u.input));
      }
      if (block.toolResult !== undefined) {
        const r = block.toolResult;
        if (!isRecord(r) || typeof r.toolUseId !== 'string' || !Array.isArray(r.content)) return MALFORMED;
        for (const c of r.content) {
          if (!isRecord(c)) return MALFORMED;
          if (typeof c.text === 'string') promptTokens += countWords(c.text);
        }
      }
    }
  }
  return { promptTokens, maxTokens, stopSequences, ...(tools ? { tools } : {}) };
}

/** Converse's conversation rules; runs once the model is known, as Bedrock does. */
function validateConversation(body: unknown): string | undefined {
  const messages = isRecord(body) && Array.isArray(body.messages) ? body.messages : [];
  const first = messages[0];
  if (first === undefined || !isRecord(first) || first.role !== 'user') {
    return 'A conversation must start with a user message. Try again with a conversation that starts with a user message.';
  }
  let previous: unknown;
  for (const [i, m] of messages.entries()) {
    if (!isRecord(m)) return MALFORMED;
    if (m.role !== 'user' && m.role !== 'assistant') {
      return `1 validation error detected: Value '${String(m.role)}' at 'messages.${i}.member.role' failed to satisfy constraint: Member must satisfy enum value set: [user, assistant]`;
    }
    if (m.role === previous) {
      return 'A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again.';
    }
    previous = m.role;
    if (!Array.isArray(m.content) || m.content.length === 0) {
      return `The content field in the Message object at messages.${i} is empty. Add a ContentBlock object to the content field and try again.`;
    }
    for (const [j, block] of m.content.entries()) {
      if (isRecord(block) && typeof block.text === 'string' && block.text.trim() === '') {
        return `The text field in the ContentBlock object at messages.${i}.content.${j} is blank. Add text to the text field, and try again.`;
      }
    }
  }
  // Tool turns: Converse needs the toolConfig for them, and each assistant turn's toolUse ids
  // answered by toolResult blocks in the next user turn, no more and no fewer.
  const blocksOf = (m: unknown): Record<string, unknown>[] =>
    isRecord(m) && Array.isArray(m.content) ? m.content.filter(isRecord) : [];
  const usesTools = messages.some((m) =>
    blocksOf(m).some((b) => b.toolUse !== undefined || b.toolResult !== undefined),
  );
  if (usesTools && !(isRecord(body) && body.toolConfig !== undefined)) {
    return 'The toolConfig field must be defined when using toolUse and toolResult content blocks.';
  }
  for (const [i, m] of messages.entries()) {
    const results = blocksOf(m).flatMap((b) => (isRecord(b.toolResult) ? [String(b.toolResult.toolUseId)] : []));
    const asked = blocksOf(messages[i - 1]).flatMap((b) => (isRecord(b.toolUse) ? [String(b.toolUse.toolUseId)] : []));
    if (results.length > asked.length) {
      return `The number of toolResult blocks at messages.${i}.content exceeds the number of toolUse blocks of previous turn.`;
    }
    const missing = asked.filter((id) => !results.includes(id));
    if (isRecord(m) && m.role === 'user' && missing.length > 0) {
      return `Expected toolResult blocks at messages.${i}.content for the following Ids: ${missing.join(', ')}`;
    }
  }
  return undefined;
}

/**
 * The tool call the double's model makes: when the request gives tools and the conversation does
 * not end with tool results, it calls the chosen tool (tool_choice's, else one the last user
 * message names, else the first), with every required string property of its schema filled in.
 */
function toolCall(
  plan: ConversePlan,
  body: unknown,
): { toolUseId: string; name: string; input: Record<string, unknown> } | undefined {
  if (!plan.tools) return undefined;
  const messages = isRecord(body) && Array.isArray(body.messages) ? body.messages : [];
  const last = messages.at(-1);
  const answered =
    isRecord(last) &&
    Array.isArray(last.content) &&
    last.content.some((b) => isRecord(b) && b.toolResult !== undefined);
  if (answered) return undefined;
  const choice = plan.tools.choice;
  // Like a model told which tool to use: the one the last user message names, else the first.
  const said =
    isRecord(last) && Array.isArray(last.content)
      ? last.content.map((b) => (isRecord(b) && typeof b.text === 'string' ? b.text : '')).join(' ')
      : '';
  const spec =
    typeof choice === 'object'
      ? plan.tools.specs.find((t) => t.name === choice.tool)
      : (plan.tools.specs.find((t) => said.includes(t.name)) ?? plan.tools.specs[0]);
  if (!spec) return undefined;
  const input: Record<string, unknown> = {};
  const props = isRecord(spec.schema.properties) ? spec.schema.properties : {};
  const required = Array.isArray(spec.schema.required) ? spec.schema.required : [];
  for (const name of required) {
    const prop = props[String(name)];
    input[String(name)] =
      isRecord(prop) && prop.type === 'number' ? 1 : isRecord(prop) && prop.type === 'boolean' ? true : 'tok0';
  }
  return { toolUseId: `tooluse_${messages.length}`, name: spec.name, input };
}

function complete(available: number, plan: ConversePlan): { tokens: string[]; stopReason: string } {
  const limit = plan.maxTokens === undefined ? available : Math.min(available, plan.maxTokens);
  const tokens: string[] = [];
  for (let i = 0; i < limit; i++) {
    const tok = `tok${i}`;
    if (plan.stopSequences.includes(tok)) return { tokens, stopReason: 'stop_sequence' };
    tokens.push(tok);
  }
  return { tokens, stopReason: limit < available ? 'max_tokens' : 'end_turn' };
}

/** The words before the last cachePoint block (system first, then the messages), and that text as the cache key. */
function cachedPrefix(body: Record<string, unknown>): { tokens: number; key: string } | undefined {
  const blocks = [
    ...(Array.isArray(body.system) ? body.system : []),
    ...(Array.isArray(body.messages) ? body.messages : []).flatMap((m) =>
      isRecord(m) && Array.isArray(m.content) ? m.content : [],
    ),
  ];
  let last = -1;
  blocks.forEach((b, i) => {
    if (isRecord(b) && b.cachePoint !== undefined) last = i;
  });
  if (last < 0) return undefined;
  const text = blocks
    .slice(0, last)
    .map((b) => (isRecord(b) && typeof b.text === 'string' ? b.text : ''))
    .join('\n');
  return { tokens: countWords(text), key: text };
}

function hasImage(body: unknown): boolean {
  const messages = isRecord(body) && Array.isArray(body.messages) ? body.messages : [];
  return messages.some(
    (m) => isRecord(m) && Array.isArray(m.content) && m.content.some((b) => isRecord(b) && b.image !== undefined),
  );
}

/** The double's one thought, signed as Bedrock signs reasoning (a client cannot forge or alter it). */
const THOUGHT = {
  text: 'The user asks; a short answer will do.',
  signature: signatureOf('The user asks; a short answer will do.'),
};

function signatureOf(text: string): string {
  return createHash('sha256').update(`aws-double-thinking:${text}`).digest('base64');
}

function thinkingOn(body: Record<string, unknown>): boolean {
  const fields = body.additionalModelRequestFields;
  return isRecord(fields) && isRecord(fields.thinking) && fields.thinking.type === 'enabled';
}

/**
 * Anthropic's rule with thinking on: the last assistant turn of a tool-use loop starts with its
 * reasoning block, returned unchanged (the signature must match).
 */
function thinkingTurnProblem(body: Record<string, unknown>): string | undefined {
  const messages = Array.isArray(body.messages) ? body.messages : [];
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (!isRecord(m) || m.role !== 'assistant' || !Array.isArray(m.content)) continue;
    if (!m.content.some((c) => isRecord(c) && c.toolUse !== undefined)) return undefined;
    const first = m.content[0];
    const reasoning = isRecord(first) && isRecord(first.reasoningContent) ? first.reasoningContent : undefined;
    if (reasoning === undefined) {
      const found = isRecord(first) && first.toolUse !== undefined ? 'tool_use' : 'text';
      return `messages.${i}.content.0.type: Expected \`thinking\` or \`redacted_thinking\`, but found \`${found}\`. When \`thinking\` is enabled, a final \`assistant\` message must start with a thinking block (preceeding the lastmost set of \`tool_use\` and \`tool_result\` blocks). We recommend you include thinking blocks from previous turns.`;
    }
    const text = isRecord(reasoning.reasoningText) ? reasoning.reasoningText : undefined;
    if (text !== undefined && text.signature !== signatureOf(String(text.text))) {
      return `messages.${i}.content.0: Invalid \`signature\` in \`thinking\` block`;
    }
    return undefined;
  }
  return undefined;
}

/** ApplyGuardrail's answer for these texts (botocore's ApplyGuardrailResponse). */
function appliedGuardrail(guard: Guardrail, texts: string[]): Record<string, unknown> {
  const all = texts.join('\n');
  const lower = all.toLowerCase();
  const customWords = guard.blockedWords
    .filter((w) => lower.includes(w.toLowerCase()))
    .map((match) => ({ match, action: 'BLOCKED', detected: true }));
  const topics = (guard.topics ?? [])
    .filter((t) => t.words.some((w) => lower.includes(w.toLowerCase())))
    .map((t) => ({ name: t.name, type: 'DENY', action: 'BLOCKED', detected: true }));
  const piiEntities = (guard.piiEntities ?? []).flatMap((e) =>
    [...all.matchAll(new RegExp(e.pattern.source, 'g'))].map((m) => ({
      match: m[0],
      type: e.type,
      action: 'ANONYMIZED',
      detected: true,
    })),
  );
  const blocked = customWords.length > 0 || topics.length > 0;
  const intervened = blocked || piiEntities.length > 0;
  let anonymized = all;
  for (const e of piiEntities) anonymized = anonymized.split(e.match).join(`{${e.type}}`);
  const units = Math.max(1, Math.ceil(all.length / 1000));
  const assessment: Record<string, unknown> = {};
  if (topics.length) assessment.topicPolicy = { topics };
  if (customWords.length) assessment.wordPolicy = { customWords, managedWordLists: [] };
  if (piiEntities.length) assessment.sensitiveInformationPolicy = { piiEntities, regexes: [] };
  const usage = {
    topicPolicyUnits: guard.topics?.length ? units : 0,
    contentPolicyUnits: 0,
    wordPolicyUnits: guard.blockedWords.length ? units : 0,
    sensitiveInformationPolicyUnits: guard.piiEntities?.length ? units : 0,
    sensitiveInformationPolicyFreeUnits: 0,
    contextualGroundingPolicyUnits: 0,
  };
  return {
    usage,
    action: intervened ? 'GUARDRAIL_INTERVENED' : 'NONE',
    ...(intervened ? { actionReason: blocked ? 'Guardrail blocked.' : 'Guardrail masked.' } : {}),
    outputs: intervened ? [{ text: blocked ? guard.blockedMessage : anonymized }] : [],
    assessments: [assessment],
    guardrailCoverage: { textCharacters: { guarded: all.length, total: all.length } },
  };
}

/** A user text of the conversation contains one of the guardrail's blocked words. */
function blockedBy(guardrail: Guardrail, body: Record<string, unknown>): boolean {
  const messages = Array.isArray(body.messages) ? body.messages : [];
  const texts = messages
    .filter((m) => isRecord(m) && m.role === 'user' && Array.isArray(m.content))
    .flatMap((m) => (m as { content: unknown[] }).content)
    .map((b) => (isRecord(b) && typeof b.text === 'string' ? b.text.toLowerCase() : ''));
  return guardrail.blockedWords.some((w) => texts.some((t) => t.includes(w.toLowerCase())));
}

function event(type: string, payload: unknown): Uint8Array {
  return message('event', type, payload);
}

/** An exception message of the event stream, as Bedrock sends a failure after the stream began. */
function exceptionFrame(type: string, payload: unknown): Uint8Array {
  return message('exception', type, payload);
}

function message(kind: 'event' | 'exception', type: string, payload: unknown): Uint8Array {
  return codec.encode({
    headers: {
      [kind === 'event' ? ':event-type' : ':exception-type']: { type: 'string', value: type },
      ':content-type': { type: 'string', value: 'application/json' },
      ':message-type': { type: 'string', value: kind },
    },
    body: fromUtf8(JSON.stringify(payload)),
  });
}

// ------------------------------------------------------------------ SigV4 helpers

type SignableRequest = Parameters<SignatureV4['sign']>[0];

function parseAuthorization(header: string): ParsedAuthorization | undefined {
  const m = /^AWS4-HMAC-SHA256\s+(.+)$/.exec(header.trim());
  if (m === null) return undefined;
  const fields = new Map<string, string>();
  for (const part of (m[1] ?? '').split(',')) {
    const eq = part.indexOf('=');
    if (eq > 0) fields.set(part.slice(0, eq).trim(), part.slice(eq + 1).trim());
  }
  const credential = fields.get('Credential')?.split('/');
  const signedHeaders = fields.get('SignedHeaders');
  const signature = fields.get('Signature');
  if (credential?.length !== 5 || credential[4] !== 'aws4_request' || !signedHeaders || !signature) return undefined;
  const [accessKeyId = '', date = '', region = '', service = ''] = credential;
  return { accessKeyId, date, region, service, signedHeaders: signedHeaders.split(';'), signature };
}

function parseAmzDate(v: string): Date | undefined {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(v);
  if (m === null) return undefined;
  const [, y, mo, d, h, mi, s] = m.map(Number);
  const date = new Date(Date.UTC(y ?? 0, (mo ?? 1) - 1, d, h, mi, s));
  return Number.isNaN(date.getTime()) ? undefined : date;
}

function amzDateOf(d: Date): string {
  return d
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d{3}/, '');
}

/**
 * The query as the SDK's HttpRequest held it: decoded names and values, repeated names as arrays, and a bare name
 * (no '=') as null, which SigV4 leaves out of the canonical query.
 */
function parseQuery(raw: string): Record<string, string | string[] | null> {
  const query: Record<string, string | string[] | null> = {};
  for (const pair of raw.split('&')) {
    if (pair === '') continue;
    const eq = pair.indexOf('=');
    const name = safeDecode(eq < 0 ? pair : pair.slice(0, eq));
    const value = eq < 0 ? null : safeDecode(pair.slice(eq + 1));
    const prev = query[name];
    if (value === null || prev === undefined || prev === null) query[name] = value;
    else query[name] = Array.isArray(prev) ? [...prev, value] : [prev, value];
  }
  return query;
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

function headerValue(headers: IncomingHttpHeaders, name: string): string | undefined {
  const v = headers[name.toLowerCase()];
  return Array.isArray(v) ? v.join(',') : v;
}

function sha256Hex(body: Buffer): string {
  return createHash('sha256').update(body).digest('hex');
}

/** Constant-time, like any credential comparison should be. */
function sameString(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

// ------------------------------------------------------------------ IAM helpers

/** IAM action matching: case-insensitive, `*` and `?` wildcards. */
function allows(allow: string[], action: string): boolean {
  return allow.some((pattern) => {
    const re = pattern
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replace(/\*/g, '.*')
      .replace(/\?/g, '.');
    return new RegExp(`^${re}$`, 'i').test(action);
  });
}

function arnAccount(arn: string): string | undefined {
  const account = arn.split(':')[4];
  return account ? account : undefined;
}

/** A stable AROA… id per role, as IAM's unique ids are. */
function roleId(arn: string): string {
  return `AROA${base32(createHash('sha256').update(arn).digest()).slice(0, 17)}`;
}

function randomKeyChars(n: number): string {
  return base32(randomBytes(n)).slice(0, n);
}

function base32(bytes: Buffer): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  return [...bytes].map((b) => alphabet[b % 32]).join('');
}

function nullViolation(field: string): string {
  return `1 validation error detected: Value null at '${field}' failed to satisfy constraint: Member must not be null`;
}

function patternViolation(value: string, field: string, re: RegExp): string | false {
  if (re.test(value)) return false;
  return `1 validation error detected: Value '${value}' at '${field}' failed to satisfy constraint: Member must satisfy regular expression pattern: ${re.source.slice(1, -1)}`;
}

function rangeViolation(value: string, field: string, min: number, max: number): string | false {
  const n = Number(value);
  if (Number.isInteger(n) && n >= min && n <= max) return false;
  const bound = Number.isInteger(n) && n > max ? `less than or equal to ${max}` : `greater than or equal to ${min}`;
  return `1 validation error detected: Value '${value}' at '${field}' failed to satisfy constraint: Member must have value ${bound}`;
}

// ------------------------------------------------------------------ model facts

function outputsOf(m: FoundationModel): string[] {
  return m.outputModalities ?? ['TEXT'];
}

function inputsOf(m: FoundationModel): string[] {
  return m.inputModalities ?? (outputsOf(m).includes('TEXT') ? ['TEXT', 'IMAGE'] : ['TEXT']);
}

function inferenceTypesOf(m: FoundationModel): string[] {
  return m.inferenceTypesSupported ?? ['ON_DEMAND'];
}

function streamingOf(m: FoundationModel): boolean {
  return m.streaming ?? outputsOf(m).includes('TEXT');
}

function foundationModelArn(region: string, modelId: string): string {
  return `arn:aws:bedrock:${region}::foundation-model/${modelId}`;
}

// ------------------------------------------------------------------ responses

function sendJson(ex: Exchange, status: number, payload: unknown, headers: Record<string, string> = {}): void {
  const body = JSON.stringify(payload);
  ex.wire.writeHead(status, {
    ...headers,
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(body),
    'x-amzn-RequestId': ex.requestId,
  });
  ex.wire.end(body);
}

/** restJson1 errors: the code travels in x-amzn-ErrorType (`Code:namespace`), the message in the JSON body. */
function sendBedrockError(ex: Exchange, r: Rejection): void {
  // Authentication errors come from Coral's front door, the rest from Bedrock itself.
  const authCodes: readonly string[] = Object.values(AUTH_ERRORS).map((e) => e.bedrock);
  const namespace = authCodes.includes(r.code) ? 'com.amazon.coral.service' : 'com.amazon.bedrock';
  sendJson(
    ex,
    r.status,
    { message: r.message },
    { 'x-amzn-ErrorType': `${r.code}:http://internal.amazon.com/coral/${namespace}/` },
  );
}

function sendXml(ex: Exchange, status: number, xml: string): void {
  ex.wire.writeHead(status, {
    'Content-Type': 'text/xml',
    'Content-Length': Buffer.byteLength(xml),
    'x-amzn-RequestId': ex.requestId,
  });
  ex.wire.end(xml);
}

const XML_ENTITIES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' };

function xmlEscape(s: string): string {
  return s.replace(/[&<>"']/g, (c) => XML_ENTITIES[c] ?? c);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function countWords(text: string): number {
  return text.split(/\s+/).filter((w) => w !== '').length;
}
