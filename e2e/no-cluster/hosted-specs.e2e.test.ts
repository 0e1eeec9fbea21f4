import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ExternalProviderSpec } from '../../crds/external-provider.js';
import { ProviderCredentials } from '../../crds/providers/credentials.js';
import { isFanOut, isRefusal, type ProviderTarget, type WireRequest } from '../../crds/providers/provider.js';
import { PROVIDERS } from '../../crds/providers/table.js';
import { type HostedDouble, startHostedDouble } from '../doubles/hosted.js';

/**
 * The Vertex AI double, and what the gateway sends Google, checked against Google's published
 * discovery documents (from the google-api-python-client wheel on PyPI): every path the gateway
 * calls is a method of aiplatform v1/v1beta1, STS v1 or IAM Credentials v1 with its HTTP
 * method; every field it sends is one of the method's request schema; every field the double
 * answers is one of the response schema; each location's host is the one Google lists. OpenAI's
 * and Anthropic's shapes are checked at compile time against their official SDKs' types
 * (e2e/doubles/hosted.ts `satisfies`); Azure OpenAI speaks OpenAI's, its inference specification
 * is published on no package registry reachable here.
 */

interface Method {
  httpMethod: string;
  flatPath?: string;
  path: string;
  request?: { $ref: string };
  response?: { $ref: string };
}
interface Resource {
  methods?: Record<string, Method>;
  resources?: Record<string, Resource>;
}
interface DiscoveryDoc {
  rootUrl: string;
  endpoints?: Array<{ endpointUrl: string; location: string }>;
  resources: Record<string, Resource>;
  schemas: Record<string, { properties?: Record<string, unknown> }>;
}

let docs: Record<'v1' | 'v1beta1' | 'sts' | 'iam', DiscoveryDoc>;
let double: HostedDouble;
let dir: string;

function methods(doc: DiscoveryDoc): Method[] {
  const out: Method[] = [];
  const walk = (r: Record<string, Resource>) => {
    for (const res of Object.values(r)) {
      out.push(...Object.values(res.methods ?? {}));
      walk(res.resources ?? {});
    }
  };
  walk(doc.resources);
  return out;
}

/** The method whose flat path template the URL's path fits. */
function methodOf(doc: DiscoveryDoc, httpMethod: string, path: string): Method | undefined {
  const bare = decodeURIComponent(path.replace(/^\//, '').split('?')[0] ?? '');
  return methods(doc).find((m) => {
    const template = m.flatPath ?? m.path;
    const re = new RegExp(
      `^${template.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/:]+')}$`.replace(/\\\{/g, '{'),
    );
    return m.httpMethod === httpMethod && re.test(bare);
  });
}

const fields = (doc: DiscoveryDoc, ref: string | undefined) => Object.keys(doc.schemas[ref ?? '']?.properties ?? {});

beforeAll(async () => {
  const out = execFileSync('bash', [join(import.meta.dirname, '..', 'doubles', 'google-discovery.sh')], {
    encoding: 'utf8',
  });
  const at = out.trim().split('\n').pop() ?? '';
  const read = (name: string) => JSON.parse(readFileSync(join(at, name), 'utf8')) as DiscoveryDoc;
  docs = {
    v1: read('aiplatform.v1.json'),
    v1beta1: read('aiplatform.v1beta1.json'),
    sts: read('sts.v1.json'),
    iam: read('iamcredentials.v1.json'),
  };
  double = await startHostedDouble({
    federatedToken: 'fed',
    models: { vertex: ['gemini-2.5-flash', 'claude-sonnet-4-5'] },
  });
  dir = mkdtempSync(join(tmpdir(), 'hosted-specs-'));
  writeFileSync(join(dir, 'token'), 'fed');
}, 120_000);

afterAll(async () => {
  await double?.close();
});

const vertexSpec = (location: string) =>
  ({
    provider: 'vertex-ai',
    vertex: { project: 'pao-spec', location },
    auth: {
      method: 'WorkloadIdentity',
      audience: '//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/q',
      serviceAccount: 'sa@pao-spec.iam.gserviceaccount.com',
    },
  }) as unknown as ExternalProviderSpec;

describe("Vertex AI as Google's discovery documents describe it", () => {
  it('each location is called at the host Google lists for it, global at the root', () => {
    const vertex = PROVIDERS['vertex-ai'];
    for (const location of ['us-east5', 'europe-west4', 'asia-northeast1']) {
      const listed = docs.v1.endpoints?.find((e) => e.location === location)?.endpointUrl.replace(/\/$/, '');
      expect(listed, location).toBeDefined();
      expect(vertex.baseUrl(vertexSpec(location), {})).toBe(listed);
    }
    expect(vertex.baseUrl(vertexSpec('global'), {})).toBe(docs.v1.rootUrl.replace(/\/$/, ''));
  });

  it('every call the gateway makes is a method of aiplatform v1, with its HTTP method', () => {
    const vertex = PROVIDERS['vertex-ai'];
    const t = (family: 'openai' | 'anthropic', upstreamModel: string): ProviderTarget => ({
      type: 'vertex-ai',
      family,
      upstreamModel,
      modelType: 'text',
      baseUrl: 'https://us-east5-aiplatform.googleapis.com',
      project: 'pao-spec',
      location: 'us-east5',
    });
    const one = (w: ReturnType<typeof vertex.request>): WireRequest => {
      if (isRefusal(w) || isFanOut(w)) throw new Error('expected one request');
      return w;
    };
    const calls = [
      one(vertex.request(t('openai', 'gemini-2.5-flash'), 'openai-chat', { model: 'x' }, true)).url,
      one(vertex.request(t('anthropic', 'claude-sonnet-4-5@20250929'), 'anthropic-messages', { model: 'x' }, false))
        .url,
      one(vertex.request(t('anthropic', 'claude-sonnet-4-5@20250929'), 'anthropic-messages', { model: 'x' }, true)).url,
      vertex.countTokens?.(t('anthropic', 'claude-sonnet-4-5@20250929'), { model: 'x' }, 'claude-sonnet-4-5')?.url ??
        '',
    ];
    const found = calls.map((url) => methodOf(docs.v1, 'POST', new URL(url).pathname)?.path);
    expect(found).toEqual([
      'v1/{+endpoint}/chat/completions',
      'v1/{+endpoint}:rawPredict',
      'v1/{+endpoint}:streamRawPredict',
      'v1/{+endpoint}:rawPredict',
    ]);
  });

  it("discovery's model lists are publishers.models.list of v1beta1, and the double answers only its fields", async () => {
    const spec = vertexSpec('us-east5');
    const { models: listed } = await PROVIDERS['vertex-ai'].discover(spec, double.env, async (url, init) => {
      const res = await fetch(url, { headers: { ...init.headers, authorization: `Bearer ${await token()}` } });
      return { status: res.status, headers: res.headers, body: await res.json() };
    });
    expect(listed.map((m) => m.id).sort()).toEqual(['claude-sonnet-4-5', 'gemini-2.5-flash']);
    const lists = double.calls.filter((c) => c.path.startsWith('/vertex/v1beta1/'));
    expect(lists).toHaveLength(2);
    for (const call of lists) {
      const path = call.path.replace(/^\/vertex/, '');
      const method = methodOf(docs.v1beta1, 'GET', path);
      expect(method?.path).toBe('v1beta1/{+parent}/models');
      const query = [...new URL(path, 'http://x').searchParams.keys()];
      expect(query.every((q) => q in ((method as unknown as { parameters: object }).parameters ?? {}))).toBe(true);
    }
    const res = (await (
      await fetch(`${double.env.PAO_ENDPOINT_URL_VERTEX_AI}/v1beta1/publishers/google/models`, {
        headers: { authorization: `Bearer ${await token()}` },
      })
    ).json()) as { publisherModels: Array<Record<string, unknown>> };
    const listFields = fields(
      docs.v1beta1,
      methodOf(docs.v1beta1, 'GET', 'v1beta1/publishers/google/models')?.response?.$ref,
    );
    expect(Object.keys(res).every((k) => listFields.includes(k))).toBe(true);
    const modelFields = fields(docs.v1beta1, 'GoogleCloudAiplatformV1beta1PublisherModel');
    for (const m of res.publisherModels) expect(Object.keys(m).filter((k) => !modelFields.includes(k))).toEqual([]);
  });
});

/** A token through the double's STS and IAM Credentials, as the gateway gets one. */
async function token(): Promise<string> {
  const c = new ProviderCredentials(() => undefined, {
    env: { ...double.env, GOOGLE_FEDERATED_TOKEN_FILE: join(dir, 'token') },
  });
  const h = await c.authorize(vertexSpec('us-east5'), PROVIDERS['vertex-ai'], {
    method: 'POST',
    url: `${double.env.PAO_ENDPOINT_URL_VERTEX_AI}/v1/token-check`,
    headers: {},
  });
  return (h.authorization ?? '').replace(/^Bearer /, '');
}

describe("Google's token services as their discovery documents describe them", () => {
  it('STS v1 token and IAM Credentials generateAccessToken: the paths, the fields sent, the fields answered', async () => {
    double.reset();
    expect(await token()).toMatch(/^ya29\.sa-/);
    const sts = double.calls.find((c) => c.path === '/sts/v1/token');
    const stsMethod = methodOf(docs.sts, 'POST', 'v1/token');
    expect(stsMethod?.path).toBe('v1/token');
    expect(
      Object.keys(sts?.body as object).filter((k) => !fields(docs.sts, stsMethod?.request?.$ref).includes(k)),
    ).toEqual([]);
    const iam = double.calls.find((c) => c.path.startsWith('/iam/'));
    const iamPath = (iam?.path ?? '').replace(/^\/iam\//, '');
    const iamMethod = methodOf(docs.iam, 'POST', iamPath);
    expect(iamMethod?.path).toBe('v1/{+name}:generateAccessToken');
    expect(
      Object.keys(iam?.body as object).filter((k) => !fields(docs.iam, iamMethod?.request?.$ref).includes(k)),
    ).toEqual([]);
    // The double's answers use only the response schemas' fields.
    const stsAnswer = (await (
      await fetch(`${double.url}/sts/v1/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ subjectToken: 'fed' }),
      })
    ).json()) as object;
    expect(Object.keys(stsAnswer).filter((k) => !fields(docs.sts, stsMethod?.response?.$ref).includes(k))).toEqual([]);
    const issued = double.issuedTokens().find((t) => t.startsWith('ya29.sts-'));
    const iamAnswer = (await (
      await fetch(`${double.url}/iam/${iamPath}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${issued}` },
        body: JSON.stringify({ scope: ['https://www.googleapis.com/auth/cloud-platform'] }),
      })
    ).json()) as object;
    expect(Object.keys(iamAnswer).filter((k) => !fields(docs.iam, iamMethod?.response?.$ref).includes(k))).toEqual([]);
  });
});
