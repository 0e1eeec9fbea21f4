import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { API_GROUP, KINDS } from '../../crds/constants.js';
import { KIND_NAMES } from '../../crds/schema.js';
import { type AwsDouble, startAwsDouble } from '../doubles/aws.js';
import { type HostedDouble, startHostedDouble } from '../doubles/hosted.js';
import { allBlocks, type Block, PLACEHOLDERS, where } from '../support/docs-blocks.js';
import {
  outputProblems,
  prepared,
  readerEnv,
  removeSandbox,
  runShell,
  type Sandbox,
  sandbox,
  shellProblems,
} from '../support/docs-runner.js';
import { adoptLlmsNamespace, helmOk, kubectl, kubectlOk } from '../support/kube.js';
import { type OperatorProcess, startOperatorProcess } from '../support/operator-process.js';
import { type ProxyProcess, startProxyProcess } from '../support/proxy-process.js';

/**
 * The `<!-- run: cluster -->`, `validate` and `values` blocks of README.md and docs/, on the
 * tier's real control plane: kubectl and helm run as a reader runs them (the chart installed
 * and upgraded for real), manifests applied with a server-side dry run, Helm values rendered by
 * `helm template`. README.md and docs/getting-started.md go first (they install the chart the
 * other pages assume), then every other page in order. What stands in, and why:
 *
 * - The chart's pods: kwok's nodes run no containers, so the operator and the proxy run as
 *   local processes (`operator/main.ts`, `proxy/main.ts` in cluster mode) against the same
 *   control plane, with the settings the docs install the chart with. `kubectl port-forward` to
 *   their Services is replaced by their local addresses.
 * - The providers: the hosted double (OpenAI, Anthropic, Azure OpenAI, Vertex AI, any
 *   OpenAI-compatible server; their keys are the placeholders' values, and a projected
 *   ServiceAccount token it accepts for workload identity) and the AWS double (STS and
 *   Bedrock), through the endpoint variables the docs name for private endpoints.
 * - The CRDs: the tier applied crds/ already; the CRD chart adopts them as its own, as Helm's
 *   `--take-ownership` would.
 */

const NS = 'platform-agent';
const RELEASE = 'platform-ai-optimizer';
const CRDS_RELEASE = 'platform-ai-optimizer-crds';
const BLOCK_TIMEOUT_MS = 300_000;
const FEDERATED_TOKEN = 'docs-federated-sa-token-7c2e';
const GATEWAY_PRINCIPAL = {
  accessKeyId: 'AKIAGATEWAYDOCS00001',
  secretAccessKey: 'docs/gateway/secret/access/key/0000000001',
  arn: PLACEHOLDERS['<GATEWAY_PRINCIPAL_ARN>'] ?? '',
  account: '999999999999',
};

const blocks = allBlocks();
const RUNS = new Set(['cluster', 'validate', 'values']);
const pages = [
  ...new Set(blocks.filter((b) => b.runner && RUNS.has(b.runner) && b.lang !== 'json').map((b) => b.file)),
];
const first = ['README.md', 'docs/getting-started.md'];
const files = [...first.filter((f) => pages.includes(f)), ...pages.filter((f) => !first.includes(f))];

/** Objects the suite's blocks may create, by `kubectl get` resource: what exists before is kept. */
const CREATED = [
  ['modeldeployments', 'platform-llms'],
  ['externalproviders', NS],
  ['apikeys', NS],
  ['budgets', NS],
  ['secrets', NS],
  ['configmaps', NS],
  ['nodetemplates', ''],
  ['autoscalerpolicies', ''],
] as const;

const names = (resource: string, ns: string) =>
  kubectl(['get', resource, ...(ns ? ['-n', ns] : []), '-o', 'name'])
    .stdout.split('\n')
    .filter(Boolean);

let before: Map<string, string[]>;
let hosted: HostedDouble;
let aws: AwsDouble;
let operator: OperatorProcess;
let proxy: ProxyProcess;
let env: Record<string, string>;

describe.runIf(inject('localControlPlane'))('the docs on the control plane', () => {
  beforeAll(async () => {
    before = new Map(CREATED.map(([r, ns]) => [r, names(r, ns)]));
    const dir = mkdtempSync(join(tmpdir(), 'pao-docs-cluster-'));
    // The reader's kubectl and helm, with the suite's cluster as their current context.
    const binDir = join(dir, 'bin');
    mkdirSync(binDir);
    symlinkSync(inject('kubectl'), join(binDir, 'kubectl'));
    symlinkSync(inject('helm'), join(binDir, 'helm'));
    const tokenFile = join(dir, 'token');
    writeFileSync(tokenFile, FEDERATED_TOKEN);

    adoptLlmsNamespace(RELEASE);
    for (const kind of KIND_NAMES) {
      const crd = `crd/${KINDS[kind].plural}.${API_GROUP}`;
      kubectlOk(['label', crd, 'app.kubernetes.io/managed-by=Helm', '--overwrite']);
      kubectlOk([
        'annotate',
        crd,
        `meta.helm.sh/release-name=${CRDS_RELEASE}`,
        `meta.helm.sh/release-namespace=${NS}`,
        '--overwrite',
      ]);
    }

    hosted = await startHostedDouble({
      openaiKeys: [PLACEHOLDERS['<OpenAI project key>'] ?? ''],
      anthropicKeys: [PLACEHOLDERS['<Anthropic key>'] ?? ''],
      azureKeys: [PLACEHOLDERS['<Azure OpenAI key>'] ?? ''],
      compatibleKeys: [PLACEHOLDERS['<server key>'] ?? ''],
      federatedToken: FEDERATED_TOKEN,
    });
    aws = await startAwsDouble({
      principals: [
        { ...GATEWAY_PRINCIPAL, allow: ['sts:AssumeRole'] },
        {
          accessKeyId: PLACEHOLDERS['<aws access key id>'] ?? '',
          secretAccessKey: PLACEHOLDERS['<aws secret access key>'] ?? '',
          arn: 'arn:aws:iam::123456789012:user/bedrock',
          allow: ['bedrock:*'],
          account: '123456789012',
        },
      ],
      roles: [
        {
          arn: 'arn:aws:iam::123456789012:role/platform-ai-bedrock',
          trusted: [GATEWAY_PRINCIPAL.arn],
          externalId: 'platform-ai-optimizer',
          allow: ['bedrock:*'],
        },
      ],
      models: {
        'us-east-1': [
          { modelId: 'anthropic.claude-3-haiku-20240307-v1:0', providerName: 'Anthropic' },
          { modelId: 'meta.llama3-1-8b-instruct-v1:0', providerName: 'Meta' },
        ],
        'eu-central-1': [{ modelId: 'amazon.nova-lite-v1:0', providerName: 'Amazon' }],
      },
    });
    // What the chart gives the pods: their cloud identities and where the providers are.
    const providers = {
      ...hosted.env,
      AZURE_FEDERATED_TOKEN_FILE: tokenFile,
      GOOGLE_FEDERATED_TOKEN_FILE: tokenFile,
      AWS_ACCESS_KEY_ID: GATEWAY_PRINCIPAL.accessKeyId,
      AWS_SECRET_ACCESS_KEY: GATEWAY_PRINCIPAL.secretAccessKey,
      AWS_REGION: 'us-east-1',
      AWS_ENDPOINT_URL_STS: aws.url,
      AWS_ENDPOINT_URL_BEDROCK: aws.url,
      AWS_ENDPOINT_URL_BEDROCK_RUNTIME: aws.url,
    };
    const kubeconfig = inject('kubeconfig');
    // The install's settings (README.md, getting-started.md): cluster prod-1, aws, us-east-1.
    operator = await startOperatorProcess(
      [
        '--kubeconfig',
        kubeconfig,
        '--leader-elect',
        'false',
        '--cluster-id',
        'prod-1',
        '--cloud',
        'aws',
        '--region',
        'us-east-1',
        '--port',
        '0',
        '--metrics-port',
        '0',
      ],
      { ...process.env, ...providers },
    );
    proxy = await startProxyProcess(['--kubeconfig', kubeconfig, '--usage-db', join(dir, 'usage.db')], {
      ...process.env,
      ...providers,
    });
    env = readerEnv({ PATH: `${binDir}:${process.env.PATH}`, KUBECONFIG: kubeconfig });
  }, 300_000);

  afterAll(async () => {
    await proxy?.stop('SIGTERM');
    await operator?.stop();
    await hosted?.close();
    await aws?.close();
    helmOk('uninstall', RELEASE, '-n', NS, '--ignore-not-found', '--wait');
    helmOk('uninstall', CRDS_RELEASE, '-n', NS, '--ignore-not-found');
    for (const [resource, ns] of CREATED) {
      const made = names(resource, ns).filter((n) => !before.get(resource)?.includes(n));
      if (made.length) kubectl(['delete', ...made, ...(ns ? ['-n', ns] : []), '--wait=false', '--ignore-not-found']);
    }
    kubectl(['delete', 'deploy,svc', '--all', '-n', 'platform-llms', '--wait=false']);
    // The next suite gets crds/ as the tier applied it.
    kubectlOk(['apply', '--server-side', '--force-conflicts', '--field-manager=e2e', '-f', 'crds/']);
  }, 300_000);

  it.each(files)(
    '%s: its commands run, its manifests and values are accepted',
    async (file) => {
      const s = sandbox(env, {
        'platform-ai-optimizer-proxy': proxy.base,
        'platform-ai-optimizer-operator': operator.url,
      });
      const problems: string[] = [];
      // What the last block printed, when this suite ran it: an output block shows another runner's otherwise.
      let printed: string | undefined;
      try {
        for (const b of blocks.filter((x) => x.file === file)) {
          // A page's blocks build on each other: after the first failure the rest would only fail after it.
          if (problems.length > 0) break;
          if (b.runner === 'output') {
            if (printed !== undefined) problems.push(...outputProblems(b, printed));
          } else if (b.runner && RUNS.has(b.runner) && b.lang !== 'json') printed = await runBlock(s, b, problems);
          else printed = undefined;
        }
      } finally {
        removeSandbox(s);
      }
      expect(problems).toEqual([]);
    },
    900_000,
  );
});

async function runBlock(s: Sandbox, b: Block, problems: string[]): Promise<string> {
  if (b.runner === 'validate') {
    const res = kubectl(['apply', '--dry-run=server', '-f', '-'], prepared(s, b.text));
    if (res.code !== 0) problems.push(`${where(b)}: the API server refused it: ${res.stderr}`);
    return res.stdout;
  }
  if (b.runner === 'values') {
    const file = join(s.home, `values-${b.line}.yaml`);
    writeFileSync(file, prepared(s, b.text));
    try {
      return helmOk('template', RELEASE, 'charts/platform-ai-optimizer', '-n', NS, '-f', file);
    } catch (err) {
      problems.push(`${where(b)}: ${String(err)}`);
      return '';
    }
  }
  const run = await runShell(s, b, BLOCK_TIMEOUT_MS);
  problems.push(...shellProblems(b, run));
  return run.stdout;
}
