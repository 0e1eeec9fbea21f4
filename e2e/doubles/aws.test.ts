import { request } from 'node:http';
import { Sha256 } from '@aws-crypto/sha256-js';
import {
  BedrockClient,
  ListFoundationModelsCommand,
  type ListFoundationModelsCommandInput,
} from '@aws-sdk/client-bedrock';
import {
  BedrockRuntimeClient,
  ConverseCommand,
  type ConverseCommandInput,
  ConverseStreamCommand,
  type Message,
} from '@aws-sdk/client-bedrock-runtime';
import { AssumeRoleCommand, STSClient } from '@aws-sdk/client-sts';
import { SignatureV4 } from '@smithy/signature-v4';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type AwsDouble, type Principal, type Role, startAwsDouble } from './aws.js';

/** The AWS test double (STS, Bedrock, Bedrock Runtime), driven only through the real AWS SDK v3 clients. */

const ACCOUNT = '111122223333';
const HAIKU = 'anthropic.claude-3-5-haiku-20241022-v1:0';
const NOVA = 'amazon.nova-lite-v1:0';
const TITAN_EMBED = 'amazon.titan-embed-text-v2:0';
const LLAMA = 'meta.llama3-8b-instruct-v1:0';
const CLAUDE3 = 'anthropic.claude-3-haiku-20240307-v1:0';

const principal = (name: string, allow: string[]): Principal => ({
  accessKeyId: `AKIA${name.toUpperCase().padEnd(16, 'X')}`,
  secretAccessKey: `secret/${name}+${'k'.repeat(30)}`,
  arn: `arn:aws:iam::${ACCOUNT}:user/${name}`,
  allow,
  account: ACCOUNT,
});

const ADMIN = principal('admin', [
  'bedrock:ListFoundationModels',
  'bedrock:InvokeModel',
  'bedrock:InvokeModelWithResponseStream',
]);
const INVOKE_ONLY = principal('invoker', ['bedrock:InvokeModel']);
const GATEWAY = principal('gateway', ['sts:AssumeRole']);
const OUTSIDER = principal('outsider', ['sts:*']);
const NO_STS = principal('nosts', ['bedrock:*']);

const ROLE: Role = {
  arn: `arn:aws:iam::${ACCOUNT}:role/gateway/bedrock-invoker`,
  trusted: [GATEWAY.arn],
  externalId: 'ext-123',
  allow: ['bedrock:InvokeModel', 'bedrock:InvokeModelWithResponseStream'],
};

const MODELS = {
  'us-east-1': [
    {
      modelId: HAIKU,
      providerName: 'Anthropic',
      modelName: 'Claude 3.5 Haiku',
      // Claude 3.5 Haiku takes no images on Bedrock.
      inputModalities: ['TEXT'],
      inferenceTypesSupported: ['INFERENCE_PROFILE'],
    },
    {
      modelId: NOVA,
      providerName: 'Amazon',
      modelName: 'Nova Lite',
      inferenceTypesSupported: ['ON_DEMAND', 'INFERENCE_PROFILE'],
    },
    { modelId: TITAN_EMBED, providerName: 'Amazon', outputModalities: ['EMBEDDING'] },
    { modelId: LLAMA, providerName: 'Meta' },
    { modelId: CLAUDE3, providerName: 'Anthropic' },
  ],
  'eu-west-1': [{ modelId: NOVA, providerName: 'Amazon' }],
};

type Creds = { accessKeyId: string; secretAccessKey: string; sessionToken?: string | undefined };

const keys = (p: Principal): Creds => ({ accessKeyId: p.accessKeyId, secretAccessKey: p.secretAccessKey });

const user = (text: string): Message => ({ role: 'user', content: [{ text }] });

/** What a rejected SDK call surfaced: the error name (the wire error code), message and HTTP status. */
async function failure(call: Promise<unknown>): Promise<{ name: string; message: string; status: number | undefined }> {
  try {
    await call;
  } catch (err) {
    if (!(err instanceof Error)) throw err;
    const meta = (err as Error & { $metadata?: { httpStatusCode?: number } }).$metadata;
    return { name: err.name, message: err.message, status: meta?.httpStatusCode };
  }
  throw new Error('expected the call to fail');
}

/**
 * A Converse call signed by SignatureV4 directly and sent with node:http (HTTP/1.1), i.e. not the SDK's pipeline:
 * shows the double verifies whatever a SigV4 signer produced, not just what the SDK happens to send.
 */
async function signedPost(
  path: string,
  applyChecksum: boolean,
  payload: unknown,
  sign = true,
): Promise<{ status: number; body: string; errorType: string | undefined }> {
  const url = new URL(double.url);
  const body = JSON.stringify(payload);
  const unsigned = {
    method: 'POST',
    protocol: 'http:',
    hostname: url.hostname,
    port: Number(url.port),
    path,
    query: {},
    headers: { host: url.host, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) },
    body,
  };
  const signer = new SignatureV4({
    service: 'bedrock',
    region: 'us-east-1',
    credentials: keys(ADMIN),
    sha256: Sha256,
    applyChecksum,
  });
  const req = sign ? await signer.sign(unsigned) : unsigned;
  expect('x-amz-content-sha256' in req.headers).toBe(sign && applyChecksum);
  return new Promise((resolve, reject) => {
    const r = request({ host: url.hostname, port: url.port, method: 'POST', path, headers: req.headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          body: Buffer.concat(chunks).toString(),
          errorType: res.headers['x-amzn-errortype']?.toString(),
        }),
      );
    });
    r.on('error', reject);
    r.end(body);
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let double: AwsDouble;
const clients: Array<{ destroy(): void }> = [];

function track<T extends { destroy(): void }>(client: T): T {
  clients.push(client);
  return client;
}

// Retries off: every error must reach the test as the first (and only) attempt saw it.
const sts = (credentials: Creds, url = double.url) =>
  track(new STSClient({ region: 'us-east-1', endpoint: url, credentials, maxAttempts: 1 }));
const bedrock = (credentials: Creds, region = 'us-east-1') =>
  track(new BedrockClient({ region, endpoint: double.url, credentials, maxAttempts: 1 }));
const runtime = (credentials: Creds, region = 'us-east-1', url = double.url) =>
  track(new BedrockRuntimeClient({ region, endpoint: url, credentials, maxAttempts: 1 }));

function assume(caller: Creds, externalId: string | null = 'ext-123', url = double.url) {
  return sts(caller, url).send(
    new AssumeRoleCommand({ RoleArn: ROLE.arn, RoleSessionName: 'gw-session', ExternalId: externalId ?? undefined }),
  );
}

beforeAll(async () => {
  double = await startAwsDouble({
    principals: [ADMIN, INVOKE_ONLY, GATEWAY, OUTSIDER, NO_STS],
    roles: [ROLE],
    models: MODELS,
    notEnabled: [LLAMA],
    needsUseCase: [CLAUDE3],
  });
});

beforeEach(() => {
  double.setCompletionTokens(8);
  double.throttle(0);
});

afterAll(async () => {
  for (const c of clients) c.destroy();
  await double?.close();
});

describe('STS AssumeRole', () => {
  it('issues temporary credentials that sign runtime calls as the role', async () => {
    const out = await assume(keys(GATEWAY));
    const c = out.Credentials;
    expect(c?.AccessKeyId).toMatch(/^ASIA[A-Z2-7]{16}$/);
    expect(c?.SecretAccessKey).toBeTruthy();
    expect(c?.SessionToken).toBeTruthy();
    expect(c?.Expiration).toBeInstanceOf(Date);
    const ttl = (c?.Expiration?.getTime() ?? 0) - Date.now();
    expect(ttl).toBeGreaterThan(3590_000);
    expect(ttl).toBeLessThanOrEqual(3600_000);
    expect(out.AssumedRoleUser?.Arn).toBe(`arn:aws:sts::${ACCOUNT}:assumed-role/bedrock-invoker/gw-session`);
    expect(out.AssumedRoleUser?.AssumedRoleId).toMatch(/^AROA[A-Z2-7]{17}:gw-session$/);
    expect(out.$metadata.requestId).toMatch(/^[0-9a-f-]{36}$/);

    const temp = {
      accessKeyId: c?.AccessKeyId ?? '',
      secretAccessKey: c?.SecretAccessKey ?? '',
      sessionToken: c?.SessionToken,
    };
    const res = await runtime(temp).send(new ConverseCommand({ modelId: `us.${HAIKU}`, messages: [user('hi')] }));
    expect(res.output?.message?.content?.[0]?.text).toBe('tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7');
    expect(double.calls.at(-1)).toEqual({
      service: 'bedrock',
      action: 'Converse',
      region: 'us-east-1',
      accessKeyId: temp.accessKeyId,
      status: 200,
    });

    // The role's policy is what the session may do: it was not granted ListFoundationModels.
    const list = await failure(bedrock(temp).send(new ListFoundationModelsCommand({})));
    expect(list.name).toBe('AccessDeniedException');
    expect(list.message).toContain(`arn:aws:sts::${ACCOUNT}:assumed-role/bedrock-invoker/gw-session`);

    // The key is useless without its session token.
    const noToken = await failure(
      runtime({ accessKeyId: temp.accessKeyId, secretAccessKey: temp.secretAccessKey }).send(
        new ConverseCommand({ modelId: NOVA, messages: [user('hi')] }),
      ),
    );
    expect(noToken).toMatchObject({ name: 'UnrecognizedClientException', status: 403 });
  });

  it('denies a caller the trust policy does not name', async () => {
    const err = await failure(assume(keys(OUTSIDER)));
    expect(err).toEqual({
      name: 'AccessDenied',
      message: `User: ${OUTSIDER.arn} is not authorized to perform: sts:AssumeRole on resource: ${ROLE.arn}`,
      status: 403,
    });
  });

  it('denies a wrong or missing external id', async () => {
    expect(await failure(assume(keys(GATEWAY), 'wrong-id'))).toMatchObject({ name: 'AccessDenied', status: 403 });
    expect(await failure(assume(keys(GATEWAY), null))).toMatchObject({ name: 'AccessDenied', status: 403 });
  });

  it('denies a caller without sts:AssumeRole and an unknown role', async () => {
    const noPolicy = await failure(assume(keys(NO_STS)));
    expect(noPolicy.name).toBe('AccessDenied');
    expect(noPolicy.message).toContain('because no identity-based policy allows the sts:AssumeRole action');
    const missing = await failure(
      sts(keys(GATEWAY)).send(new AssumeRoleCommand({ RoleArn: `${ROLE.arn}-nope`, RoleSessionName: 's1' })),
    );
    expect(missing).toMatchObject({ name: 'AccessDenied', status: 403 });
  });

  it('validates parameters like STS', async () => {
    const err = await failure(
      sts(keys(GATEWAY)).send(
        new AssumeRoleCommand({ RoleArn: ROLE.arn, RoleSessionName: 'bad name', ExternalId: 'ext-123' }),
      ),
    );
    expect(err).toMatchObject({ name: 'ValidationError', status: 400 });
    expect(err.message).toContain("at 'roleSessionName'");
    const long = await failure(
      sts(keys(GATEWAY)).send(
        new AssumeRoleCommand({
          RoleArn: ROLE.arn,
          RoleSessionName: 's1',
          ExternalId: 'ext-123',
          DurationSeconds: 7200,
        }),
      ),
    );
    expect(long.message).toBe('The requested DurationSeconds exceeds the MaxSessionDuration set for this role.');
  });

  it('reports STS signature failures in its own error codes', async () => {
    const bad = await failure(assume({ ...keys(GATEWAY), secretAccessKey: 'not-the-secret' }));
    expect(bad).toMatchObject({ name: 'SignatureDoesNotMatch', status: 403 });
    const unknown = await failure(assume({ accessKeyId: 'AKIANOBODYXXXXXXXXXX', secretAccessKey: 'x' }));
    expect(unknown).toEqual({
      name: 'InvalidClientTokenId',
      message: 'The security token included in the request is invalid.',
      status: 403,
    });
  });

  it('expires temporary credentials', async () => {
    const short = await startAwsDouble({
      principals: [GATEWAY],
      roles: [ROLE],
      models: MODELS,
      credentialTtlSeconds: 0.25,
    });
    try {
      const c = (await assume(keys(GATEWAY), 'ext-123', short.url)).Credentials;
      const temp = {
        accessKeyId: c?.AccessKeyId ?? '',
        secretAccessKey: c?.SecretAccessKey ?? '',
        sessionToken: c?.SessionToken,
      };
      const client = runtime(temp, 'us-east-1', short.url);
      const input = { modelId: NOVA, messages: [user('hi')] };
      await client.send(new ConverseCommand(input));
      await sleep(300);
      const err = await failure(client.send(new ConverseCommand(input)));
      expect(err).toEqual({
        name: 'ExpiredTokenException',
        message: 'The security token included in the request is expired',
        status: 403,
      });
    } finally {
      await short.close();
    }
  });
});

describe('SigV4 verification', () => {
  it('rejects a wrong secret with InvalidSignatureException', async () => {
    const err = await failure(
      runtime({ ...keys(ADMIN), secretAccessKey: 'wrong' }).send(
        new ConverseCommand({ modelId: NOVA, messages: [user('hi')] }),
      ),
    );
    expect(err.name).toBe('InvalidSignatureException');
    expect(err.status).toBe(403);
    expect(err.message).toMatch(/^The request signature we calculated does not match the signature you provided/);
  });

  it('rejects an unknown key with UnrecognizedClientException', async () => {
    const err = await failure(
      bedrock({ accessKeyId: 'AKIAUNKNOWNXXXXXXXXX', secretAccessKey: 'x' }).send(new ListFoundationModelsCommand({})),
    );
    expect(err).toEqual({
      name: 'UnrecognizedClientException',
      message: 'The security token included in the request is invalid.',
      status: 403,
    });
    expect(double.calls.at(-1)).toMatchObject({ service: 'bedrock', action: 'ListFoundationModels', status: 403 });
  });

  it('rejects a body altered after signing', async () => {
    const client = runtime(keys(ADMIN));
    const tamper =
      <A extends { request: unknown }, R>(next: (args: A) => Promise<R>) =>
      (args: A): Promise<R> => {
        // Same length, so content-length (also signed) still holds and only the payload hash can catch it.
        const req = args.request as { body?: unknown };
        const raw = req.body;
        const body = ArrayBuffer.isView(raw) ? Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString() : raw;
        if (typeof body === 'string') req.body = body.replace('hello', 'hullo');
        return next(args);
      };
    client.middlewareStack.addRelativeTo(tamper, {
      relation: 'after',
      toMiddleware: 'httpSigningMiddleware',
      name: 'tamper',
    });
    const err = await failure(client.send(new ConverseCommand({ modelId: NOVA, messages: [user('hello')] })));
    expect(err.name).toBe('InvalidSignatureException');
  });

  it('covers the query string in the signature', async () => {
    const client = bedrock(keys(ADMIN));
    const swapProvider =
      <A extends { request: unknown }, R>(next: (args: A) => Promise<R>) =>
      (args: A): Promise<R> => {
        const req = args.request as { query?: Record<string, unknown> };
        if (req.query) req.query.byProvider = 'Meta';
        return next(args);
      };
    client.middlewareStack.addRelativeTo(swapProvider, {
      relation: 'after',
      toMiddleware: 'httpSigningMiddleware',
      name: 'swapProvider',
    });
    const err = await failure(client.send(new ListFoundationModelsCommand({ byProvider: 'Amazon' })));
    expect(err.name).toBe('InvalidSignatureException');
  });

  it('verifies other signers over HTTP/1.1, with or without x-amz-content-sha256', async () => {
    for (const applyChecksum of [false, true]) {
      const res = await signedPost(`/model/${encodeURIComponent(`us.${NOVA}`)}/converse`, applyChecksum, {
        messages: [user('a b')],
      });
      expect(res.status).toBe(200);
      expect(JSON.parse(res.body)).toMatchObject({ stopReason: 'end_turn', usage: { inputTokens: 2 } });
    }
    const unsigned = await signedPost('/model/x/converse', false, {}, false);
    expect(unsigned.status).toBe(403);
    expect(unsigned.errorType).toMatch(/^MissingAuthenticationTokenException:/);
  });
});

describe('Bedrock ListFoundationModels', () => {
  it('lists the models of the signing region, with filters', async () => {
    const all = await bedrock(keys(ADMIN)).send(new ListFoundationModelsCommand({}));
    expect(all.modelSummaries?.map((m) => m.modelId)).toEqual([HAIKU, NOVA, TITAN_EMBED, LLAMA, CLAUDE3]);
    expect(all.modelSummaries?.[0]).toEqual({
      modelArn: `arn:aws:bedrock:us-east-1::foundation-model/${HAIKU}`,
      modelId: HAIKU,
      modelName: 'Claude 3.5 Haiku',
      providerName: 'Anthropic',
      inputModalities: ['TEXT'],
      outputModalities: ['TEXT'],
      responseStreamingSupported: true,
      customizationsSupported: [],
      inferenceTypesSupported: ['INFERENCE_PROFILE'],
      modelLifecycle: { status: 'ACTIVE' },
    });
    expect(all.modelSummaries?.[2]?.responseStreamingSupported).toBe(false);

    const client = bedrock(keys(ADMIN));
    const ids = async (input: ListFoundationModelsCommandInput) =>
      (await client.send(new ListFoundationModelsCommand(input))).modelSummaries?.map((m) => m.modelId);
    expect(await ids({ byProvider: 'anthropic' })).toEqual([HAIKU, CLAUDE3]);
    expect(await ids({ byOutputModality: 'EMBEDDING' })).toEqual([TITAN_EMBED]);
    expect(await ids({ byInferenceType: 'ON_DEMAND', byProvider: 'Amazon' })).toEqual([NOVA, TITAN_EMBED]);

    const eu = await bedrock(keys(ADMIN), 'eu-west-1').send(new ListFoundationModelsCommand({}));
    expect(eu.modelSummaries?.map((m) => m.modelArn)).toEqual([`arn:aws:bedrock:eu-west-1::foundation-model/${NOVA}`]);
    const nowhere = await bedrock(keys(ADMIN), 'ap-south-2').send(new ListFoundationModelsCommand({}));
    expect(nowhere.modelSummaries).toEqual([]);
    expect(double.calls.at(-1)).toEqual({
      service: 'bedrock',
      action: 'ListFoundationModels',
      region: 'ap-south-2',
      accessKeyId: ADMIN.accessKeyId,
      status: 200,
    });
  });

  it('requires bedrock:ListFoundationModels', async () => {
    const err = await failure(bedrock(keys(INVOKE_ONLY)).send(new ListFoundationModelsCommand({})));
    expect(err).toEqual({
      name: 'AccessDeniedException',
      message: `User: ${INVOKE_ONLY.arn} is not authorized to perform: bedrock:ListFoundationModels because no identity-based policy allows the bedrock:ListFoundationModels action`,
      status: 403,
    });
  });
});

describe('Bedrock Runtime Converse', () => {
  const converse = (input: Partial<ConverseCommandInput>, creds: Creds = keys(ADMIN)) =>
    runtime(creds).send(new ConverseCommand({ modelId: NOVA, messages: [user('hi')], ...input }));

  it('answers with deterministic tokens, usage and end_turn', async () => {
    double.setCompletionTokens(3);
    const res = await converse({
      modelId: `us.${HAIKU}`,
      system: [{ text: 'Be terse.' }],
      messages: [user('hello  there\nworld'), { role: 'assistant', content: [{ text: 'ok' }] }, user('again')],
    });
    expect(res.output?.message).toEqual({ role: 'assistant', content: [{ text: 'tok0 tok1 tok2' }] });
    expect(res.stopReason).toBe('end_turn');
    // "Be terse." 2 + "hello there world" 3 + "ok" 1 + "again" 1
    expect(res.usage).toEqual({ inputTokens: 7, outputTokens: 3, totalTokens: 10 });
    expect(res.metrics?.latencyMs).toBeGreaterThanOrEqual(0);
  });

  it('stops at maxTokens and before a stop sequence', async () => {
    const capped = await converse({ inferenceConfig: { maxTokens: 2 } });
    expect(capped.output?.message?.content?.[0]?.text).toBe('tok0 tok1');
    expect(capped.stopReason).toBe('max_tokens');
    expect(capped.usage?.outputTokens).toBe(2);

    const stopped = await converse({ inferenceConfig: { stopSequences: ['tok3'] } });
    expect(stopped.output?.message?.content?.[0]?.text).toBe('tok0 tok1 tok2');
    expect(stopped.stopReason).toBe('stop_sequence');
  });

  it('resolves model ids like Bedrock', async () => {
    const invalid = await failure(converse({ modelId: 'acme.nope-v1:0' }));
    expect(invalid).toEqual({
      name: 'ValidationException',
      message: 'The provided model identifier is invalid.',
      status: 400,
    });
    // A geo prefix that does not serve the signing region.
    expect((await failure(converse({ modelId: `eu.${HAIKU}` }))).name).toBe('ValidationException');
    // An inference-profile-only model called by its bare id.
    expect((await failure(converse({ modelId: HAIKU }))).message).toMatch(/with on-demand throughput isn't supported/);
    // A model that supports both, by profile and by ARN.
    expect((await converse({ modelId: `us.${NOVA}` })).stopReason).toBe('end_turn');
    expect((await converse({ modelId: `arn:aws:bedrock:us-east-1::foundation-model/${NOVA}` })).stopReason).toBe(
      'end_turn',
    );
    const embed = await failure(converse({ modelId: TITAN_EMBED }));
    expect(embed.message).toMatch(/doesn't support the model that you provided/);
  });

  it('refuses models the account has not enabled or lacks use-case details for', async () => {
    expect(await failure(converse({ modelId: LLAMA }))).toEqual({
      name: 'AccessDeniedException',
      message: "You don't have access to the model with the specified model ID.",
      status: 403,
    });
    expect(await failure(converse({ modelId: CLAUDE3 }))).toEqual({
      name: 'ValidationException',
      message:
        'Model use case details have not been submitted for this account. Fill out the Anthropic use case details form before using the model.',
      status: 400,
    });
  });

  it('validates the conversation', async () => {
    const twoUsers = await failure(converse({ messages: [user('a'), user('b')] }));
    expect(twoUsers.name).toBe('ValidationException');
    expect(twoUsers.message).toMatch(/^A conversation must alternate between user and assistant roles/);
    const assistantFirst = await failure(converse({ messages: [{ role: 'assistant', content: [{ text: 'x' }] }] }));
    expect(assistantFirst.message).toMatch(/^A conversation must start with a user message/);
    const empty = await failure(converse({ messages: [{ role: 'user', content: [] }] }));
    expect(empty.message).toMatch(/content field in the Message object at messages.0 is empty/);
    const zero = await failure(converse({ inferenceConfig: { maxTokens: 0 } }));
    expect(zero.message).toMatch(/'inferenceConfig.maxTokens' failed to satisfy constraint/);
  });

  it('calls a tool when given tools, and checks tool turns as Bedrock does', async () => {
    const toolConfig = {
      tools: [
        {
          toolSpec: {
            name: 'get_weather',
            inputSchema: { json: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
          },
        },
      ],
    };
    const called = await converse({ toolConfig });
    expect(called.stopReason).toBe('tool_use');
    const use = called.output?.message?.content?.[0]?.toolUse;
    expect(use).toMatchObject({ name: 'get_weather', input: { city: 'tok0' } });
    const id = use?.toolUseId ?? '';
    const turns = [
      user('hi'),
      {
        role: 'assistant' as const,
        content: [{ toolUse: { toolUseId: id, name: 'get_weather', input: { city: 'tok0' } } }],
      },
    ];
    const answered = await converse({
      toolConfig,
      messages: [...turns, { role: 'user', content: [{ toolResult: { toolUseId: id, content: [{ text: '18 C' }] } }] }],
    });
    expect(answered.stopReason).toBe('end_turn');
    expect((await failure(converse({ messages: [...turns, user('and?')] }))).message).toBe(
      'The toolConfig field must be defined when using toolUse and toolResult content blocks.',
    );
    expect((await failure(converse({ toolConfig, messages: [...turns, user('and?')] }))).message).toBe(
      `Expected toolResult blocks at messages.2.content for the following Ids: ${id}`,
    );
    const named = await failure(converse({ toolConfig: { ...toolConfig, toolChoice: { tool: { name: 'other' } } } }));
    expect(named.message).toMatch(/toolChoice is not defined/);
  });

  it('throttles the next N calls with HTTP 429', async () => {
    double.throttle(2);
    for (let i = 0; i < 2; i++) {
      expect(await failure(converse({}))).toEqual({
        name: 'ThrottlingException',
        message: 'Too many requests, please wait before trying again.',
        status: 429,
      });
    }
    expect((await converse({})).stopReason).toBe('end_turn');
  });

  it('names the missing permission and the model ARN', async () => {
    const err = await failure(converse({}, keys(GATEWAY)));
    expect(err).toEqual({
      name: 'AccessDeniedException',
      message: `User: ${GATEWAY.arn} is not authorized to perform: bedrock:InvokeModel on resource: arn:aws:bedrock:us-east-1::foundation-model/${NOVA} because no identity-based policy allows the bedrock:InvokeModel action`,
      status: 403,
    });
  });
});

describe('Bedrock Runtime ConverseStream', () => {
  async function stream(creds: Creds, input: Partial<ConverseCommandInput> = {}) {
    const res = await runtime(creds).send(
      new ConverseStreamCommand({ modelId: `us.${HAIKU}`, messages: [user('one two three')], ...input }),
    );
    const order: string[] = [];
    let text = '';
    let stopReason: string | undefined;
    let usage: unknown;
    for await (const ev of res.stream ?? []) {
      order.push(Object.keys(ev).filter((k) => ev[k as keyof typeof ev] !== undefined)[0] ?? '?');
      if (ev.contentBlockDelta?.delta?.text !== undefined) text += ev.contentBlockDelta.delta.text;
      if (ev.messageStop) stopReason = ev.messageStop.stopReason;
      if (ev.metadata) usage = ev.metadata.usage;
    }
    return { order, text, stopReason, usage, requestId: res.$metadata.requestId };
  }

  it('emits messageStart, deltas, contentBlockStop, messageStop, metadata', async () => {
    double.setCompletionTokens(3);
    const out = await stream(keys(ADMIN));
    expect(out.order).toEqual([
      'messageStart',
      'contentBlockDelta',
      'contentBlockDelta',
      'contentBlockDelta',
      'contentBlockStop',
      'messageStop',
      'metadata',
    ]);
    expect(out.text).toBe('tok0 tok1 tok2');
    expect(out.stopReason).toBe('end_turn');
    expect(out.usage).toEqual({ inputTokens: 3, outputTokens: 3, totalTokens: 6 });
    expect(double.calls.at(-1)).toMatchObject({ action: 'ConverseStream', status: 200 });

    const capped = await stream(keys(ADMIN), { inferenceConfig: { maxTokens: 1 } });
    expect(capped).toMatchObject({ text: 'tok0', stopReason: 'max_tokens' });
  });

  it('needs InvokeModelWithResponseStream even when InvokeModel works', async () => {
    const ok = await runtime(keys(INVOKE_ONLY)).send(new ConverseCommand({ modelId: NOVA, messages: [user('hi')] }));
    expect(ok.stopReason).toBe('end_turn');
    const err = await failure(stream(keys(INVOKE_ONLY)));
    expect(err.name).toBe('AccessDeniedException');
    expect(err.status).toBe(403);
    expect(err.message).toBe(
      `User: ${INVOKE_ONLY.arn} is not authorized to perform: bedrock:InvokeModelWithResponseStream on resource: arn:aws:bedrock:us-east-1:${ACCOUNT}:inference-profile/us.${HAIKU} because no identity-based policy allows the bedrock:InvokeModelWithResponseStream action`,
    );
  });

  it('throttles before streaming', async () => {
    double.throttle(1);
    expect(await failure(stream(keys(ADMIN)))).toMatchObject({ name: 'ThrottlingException', status: 429 });
    expect((await stream(keys(ADMIN))).stopReason).toBe('end_turn');
  });
});
