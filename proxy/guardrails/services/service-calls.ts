import { Agent, type Dispatcher, request } from 'undici';
import type { ExternalProvider } from '../../../crds/external-provider.js';
import type { ProviderCredentials } from '../../../crds/providers/credentials.js';
import { PROVIDERS } from '../../../crds/providers/table.js';
import type { GuardrailCalls } from '../checker.js';

/**
 * How guardrails' services are called: a JSON POST to a path under a registered provider's base
 * URL, authorized as the provider's own calls are (its key, its workload identity, or a SigV4
 * signature with its region and credentials: crds/providers/credentials.ts), or to a URL of
 * its own (an in-cluster Presidio). An error answer is told by its status and error code only:
 * AWS's and OpenAI's messages may name an account, an ARN or a key's last characters.
 */

export interface ServiceCallDeps {
  /** The ExternalProvider of this name in the gateway's namespace, now. */
  provider(name: string): ExternalProvider | undefined;
  credentials: ProviderCredentials;
  env: NodeJS.ProcessEnv;
  connectTimeoutMs?: number;
}

/** The most an answer may hold: a verdict is small, a service that streams more is not one. */
const MAX_ANSWER_BYTES = 4 * 1024 * 1024;

export function serviceCalls(deps: ServiceCallDeps): { post: GuardrailCalls['post']; close(): Promise<void> } {
  const agent = new Agent({ connect: { timeout: deps.connectTimeoutMs ?? 5_000 }, keepAliveTimeout: 30_000 });
  const post: GuardrailCalls['post'] = async (to, value, signal) => {
    const body = JSON.stringify(value);
    let url: string;
    let headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' };
    let label: string;
    if ('url' in to) {
      url = to.url;
      label = 'the service';
    } else {
      const ep = deps.provider(to.provider);
      if (!ep) throw new Error(`no ExternalProvider ${to.provider} in the gateway's namespace`);
      if (!to.types.includes(ep.spec.provider))
        throw new Error(
          `the ExternalProvider ${to.provider} is of provider ${ep.spec.provider}, not ${to.types.join(' or ')}`,
        );
      const module = PROVIDERS[ep.spec.provider];
      url = `${module.baseUrl(ep.spec, deps.env)}${to.path}`;
      label = `${module.label} (${to.provider})`;
      const identity = {
        provider: ep.spec.provider,
        auth: ep.spec.auth,
        ...(ep.spec.region ? { region: ep.spec.region } : {}),
      };
      headers = await deps.credentials.authorize(identity, module, {
        method: 'POST',
        url,
        headers: { ...headers, ...module.fixedHeaders },
        body,
      });
    }
    const answer = await request(url, { method: 'POST', headers, body, signal, dispatcher: agent });
    const text = await bounded(answer.body);
    if (answer.statusCode >= 400) throw new Error(`${label} answered ${answer.statusCode}${codeOf(answer, text)}`);
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw new Error(`${label} answered a body that is not JSON`);
    }
  };
  return { post, close: () => agent.close() };
}

async function bounded(body: Dispatcher.ResponseData['body']): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += (chunk as Buffer).length;
    if (size > MAX_ANSWER_BYTES) {
      body.destroy();
      throw new Error(`the answer is larger than ${MAX_ANSWER_BYTES} bytes`);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** An error answer's code, where it has a plain one: AWS's error type, OpenAI's error code or type. */
function codeOf(answer: Dispatcher.ResponseData, text: string): string {
  const header = answer.headers['x-amzn-errortype'];
  let code = typeof header === 'string' ? header : undefined;
  if (!code) {
    try {
      const json = JSON.parse(text) as { __type?: unknown; error?: { code?: unknown; type?: unknown } };
      const found = json.__type ?? json.error?.code ?? json.error?.type;
      code = typeof found === 'string' ? found : undefined;
    } catch {
      code = undefined;
    }
  }
  code = code?.split(':')[0]?.split('#').pop();
  return code && /^[A-Za-z0-9_.-]{1,64}$/.test(code) ? ` (${code})` : '';
}
