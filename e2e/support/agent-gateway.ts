import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { type AwsDouble, startAwsDouble } from '../doubles/aws.js';
import { OLLAMA_MODEL, type OllamaServer, startOllama } from '../ollama/server.js';
import { type ProxyProcess, startProxyProcess } from './proxy-process.js';

/**
 * What the agent and SDK suites run against: real Ollama with the e2e model, the AWS double with
 * the Bedrock models a suite names, and the standalone proxy process in front of both (a
 * ModelDeployment per Ollama model, one ExternalProvider by access key for the Bedrock ones),
 * with its usage in a SQLite file the suite reads back.
 */

export interface UsageRow {
  request_id: string;
  model: string;
  provider: string;
  endpoint: string;
  prompt: number;
  completion: number;
  status: number;
  stream: number;
  /** JSON array of "key:value". */
  tags: string;
  /** USD. */
  cost: number;
  /** Routed requests (a RoutingPolicy chose the model); null otherwise. */
  requested_model: string | null;
  routing_policy: string | null;
  routing_reason: string | null;
  escalations: number | null;
  /** USD the same tokens would have cost on the model asked for (or the policy's baseline). */
  counterfactual: number | null;
}

export interface AgentGatewayOptions {
  /** The API key callers use. */
  key: string;
  /** Foundation-model ids the double's us-east-1 offers (Anthropic's as inference profiles too) with its provider name. */
  bedrock: Array<{ modelId: string; providerName: string }>;
  /** The ids the ExternalProvider selects (`us.` profiles or foundation ids), and its aliases. */
  providerModels: string[];
  providerAliases?: Array<{ name: string; model: string }>;
  /** Ollama models besides the e2e model, made from it with parameters (/api/create), with their aliases. */
  variants?: Array<{ model: string; parameters: Record<string, number>; aliases?: string[] }>;
  /** Models the Ollama server already has (the embedding model), each deployed as a ModelDeployment of its own. */
  ollamaModels?: string[];
  /** More resource documents for the config file (ApiKeys, McpServers), as YAML. */
  documents?: string[];
  /** `<ApiKey name>=<key>` lines of the keys file, besides `key` (a key of no ApiKey). */
  namedKeys?: Record<string, string>;
  /** More Secrets for --secrets-dir (name -> key -> value), for the providers of `documents`. */
  secrets?: Record<string, Record<string, string>>;
  /** More environment of the proxy process (a double's endpoints). */
  env?: Record<string, string>;
}

export interface AgentGateway {
  ollama: OllamaServer;
  aws: AwsDouble;
  proxy: ProxyProcess;
  dir: string;
  /** Every usage row written so far, in order. */
  rows(): UsageRow[];
  /** The rows `pick` keeps, once at least `count` are written (the recorder batches every 250 ms), or after 10 s. */
  rowsAtLeast(pick: (r: UsageRow) => boolean, count: number): Promise<UsageRow[]>;
  stop(): Promise<void>;
}

const ACCESS_KEY = { id: 'AKIAAGENTS0000000001', secret: 'agentsSecret0000000000000000000000000000' };

export async function startAgentGateway(o: AgentGatewayOptions): Promise<AgentGateway> {
  const ollama = await startOllama({ parallel: 1 });
  const aws = await startAwsDouble({
    principals: [
      {
        accessKeyId: ACCESS_KEY.id,
        secretAccessKey: ACCESS_KEY.secret,
        arn: 'arn:aws:iam::123456789012:user/agents',
        allow: ['bedrock:*'],
        account: '123456789012',
      },
    ],
    models: {
      // Anthropic's models as Bedrock offers the newer ones: through inference profiles.
      'us-east-1': o.bedrock.map((m) =>
        m.providerName === 'Anthropic'
          ? { ...m, inferenceTypesSupported: ['INFERENCE_PROFILE' as const], global: true }
          : { ...m },
      ),
    },
  });
  for (const v of o.variants ?? []) {
    const created = await fetch(`${ollama.url}/api/create`, {
      method: 'POST',
      body: JSON.stringify({ model: v.model, from: OLLAMA_MODEL, parameters: v.parameters }),
    });
    if (created.status !== 200) throw new Error(`ollama create ${v.model}: ${created.status} ${await created.text()}`);
    await created.text();
  }
  const dir = mkdtempSync(join(tmpdir(), 'pao-agents-'));
  const deployment = (name: string, model: string, aliases: string[] = []) =>
    [
      'apiVersion: ai.platform/v1beta1',
      'kind: ModelDeployment',
      `metadata: {name: ${name}}`,
      `spec: ${JSON.stringify({ model, serviceName: name, endpoint: ollama.url, ...(aliases.length ? { aliases } : {}) })}`,
    ].join('\n');
  const provider = [
    'apiVersion: ai.platform/v1beta1',
    'kind: ExternalProvider',
    'metadata: {name: bedrock}',
    `spec: ${JSON.stringify({
      provider: 'bedrock',
      displayName: 'B',
      region: 'us-east-1',
      auth: { method: 'AccessKey', secretRef: { name: 'aws-keys' } },
      models: o.providerModels,
      ...(o.providerAliases?.length ? { aliases: o.providerAliases } : {}),
    })}`,
  ].join('\n');
  writeFileSync(
    join(dir, 'gateway.yaml'),
    [
      deployment('smollm2', OLLAMA_MODEL),
      ...(o.variants ?? []).map((v, i) => deployment(`variant-${i}`, v.model, v.aliases)),
      ...(o.ollamaModels ?? []).map((model, i) => deployment(`model-${i}`, model)),
      provider,
      ...(o.documents ?? []),
    ].join('\n---\n'),
  );
  const named = Object.entries(o.namedKeys ?? {}).map(([name, key]) => `${name}=${key}\n`);
  writeFileSync(join(dir, 'keys.txt'), `${o.key}\n${named.join('')}`);
  mkdirSync(join(dir, 'secrets', 'aws-keys'), { recursive: true });
  writeFileSync(join(dir, 'secrets', 'aws-keys', 'accessKeyId'), ACCESS_KEY.id);
  writeFileSync(join(dir, 'secrets', 'aws-keys', 'secretAccessKey'), ACCESS_KEY.secret);
  for (const [name, data] of Object.entries(o.secrets ?? {})) {
    mkdirSync(join(dir, 'secrets', name), { recursive: true });
    for (const [k, v] of Object.entries(data)) writeFileSync(join(dir, 'secrets', name, k), v);
  }
  const proxy = await startProxyProcess(
    [
      '--config',
      join(dir, 'gateway.yaml'),
      '--keys-file',
      join(dir, 'keys.txt'),
      '--secrets-dir',
      join(dir, 'secrets'),
      '--usage-db',
      join(dir, 'usage.db'),
    ],
    { ...process.env, AWS_ENDPOINT_URL_BEDROCK_RUNTIME: aws.url, ...o.env },
  );
  // Load the model once.
  await fetch(`${ollama.url}/api/generate`, {
    method: 'POST',
    body: JSON.stringify({ model: OLLAMA_MODEL, prompt: 'hi', options: { num_predict: 1 } }),
  });

  const rows = (): UsageRow[] => {
    let db: Database.Database | undefined;
    try {
      db = new Database(join(dir, 'usage.db'), { readonly: true, fileMustExist: true });
      return db.prepare('SELECT * FROM requests ORDER BY id').all() as UsageRow[];
    } catch {
      // the store creates its file and tables on its first batch
      return [];
    } finally {
      db?.close();
    }
  };
  return {
    ollama,
    aws,
    proxy,
    dir,
    rows,
    async rowsAtLeast(pick, count) {
      const deadline = Date.now() + 10_000;
      for (;;) {
        const picked = rows().filter(pick);
        if (picked.length >= count || Date.now() > deadline) return picked;
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    async stop() {
      await proxy.stop('SIGTERM');
      await aws.close();
      await ollama.stop();
    },
  };
}
