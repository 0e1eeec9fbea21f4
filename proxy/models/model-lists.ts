import type { Env, Hono } from 'hono';
import { AUTO_MODEL, DEFAULT_ROUTING_POLICY } from '../../crds/constants.js';
import { type Caller, type KeyPolicy, mayCall } from '../access/auth.js';
import { ProxyError } from '../endpoints/errors.js';
import type { ResolvedPolicy, RoutingPolicies } from '../routing-policy/policies.js';
import type { ModelListing, RouteTable } from '../serving/routes.js';
import { type Backends, backendOf } from '../upstreams/backend.js';
import { cliModel, type ModelFacts, openAIModel } from './model-metadata.js';

/**
 * The model lists, each showing only the names the caller's key may use (by the name itself, or
 * by the model an alias stands for): GET /openai/v1/models and /openai/v1/models/{id} in
 * OpenAI's shape with the limits agents size their prompts by, and the CLI model list GET
 * /v1/models/metadata (`include_in_cli=true` keeps the models whose resource has includeInCLI).
 */

export interface ModelListDeps {
  routes: RouteTable;
  backends: Backends;
  /** The caller a request's key names; throws the 401 to answer. */
  caller(header: (name: string) => string | undefined): Promise<Caller>;
  /** RoutingPolicies: `auto` and `<policy>/auto` are listed beside the models. */
  policies?: RoutingPolicies;
}

/** When the gateway started: the routing names' `created`. */
const STARTED = Math.floor(Date.now() / 1000);

/** `auto` (the default policy) and `<policy>/auto`, listed for a key that may call a model of the pool. */
function autoListings(policies: RoutingPolicies | undefined, key: KeyPolicy): ModelListing[] {
  return (policies?.list() ?? [])
    .filter((p) => p.pool.some((m) => mayCall(key, m.name)))
    .map((p) => {
      const id = p.name === DEFAULT_ROUTING_POLICY ? AUTO_MODEL : `${p.name}/${AUTO_MODEL}`;
      return { id, model: id, created: STARTED, provider: `routing-policy/${p.name}`, cli: true };
    })
    .sort((a, b) => a.id.localeCompare(b.id));
}

/** What a routing name can do: what the pool's most able models can (the policy picks one that fits the request). */
function autoFacts(p: ResolvedPolicy): ModelFacts {
  const windows = p.pool.flatMap((m) => (m.contextWindow ? [m.contextWindow] : []));
  const contextWindow = windows.length === p.pool.length && windows.length > 0 ? Math.max(...windows) : undefined;
  return {
    displayName: `Auto (routing policy ${p.name})`,
    provider: 'routing-policy',
    ...(contextWindow ? { contextWindow } : {}),
    tools: p.pool.some((m) => m.tools),
    reasoning: p.pool.some((m) => m.reasoning),
    images: p.pool.some((m) => m.images),
    status: 'active',
  };
}

export function modelListRoutes<E extends Env>(app: Hono<E>, deps: ModelListDeps): void {
  const visible = (policy: KeyPolicy) => [
    ...autoListings(deps.policies, policy),
    ...deps.routes.models().filter((m) => mayCall(policy, m.id) || mayCall(policy, m.model)),
  ];
  const factsOf = async (m: ModelListing): Promise<ModelFacts | undefined> => {
    const routed = m.provider.startsWith('routing-policy/') ? deps.policies?.get(m.provider.slice(15)) : undefined;
    if (routed) return autoFacts(routed);
    const entry = deps.routes.lookup(m.id);
    return entry ? backendOf(deps.backends, entry).facts(entry) : undefined;
  };

  app.get('/openai/v1/models', async (c) => {
    const listed = visible((await deps.caller((n) => c.req.header(n))).policy);
    const data = await Promise.all(listed.map(async (m) => openAIModel(m, await factsOf(m))));
    return c.json({ object: 'list', data });
  });
  app.get('/v1/models/metadata', async (c) => {
    const cliOnly = c.req.query('include_in_cli');
    if (cliOnly !== undefined && cliOnly !== 'true' && cliOnly !== 'false') {
      throw new ProxyError(
        400,
        'invalid_request_error',
        'invalid_value',
        'include_in_cli must be true or false',
        'include_in_cli',
      );
    }
    const listed = visible((await deps.caller((n) => c.req.header(n))).policy).filter(
      (m) => cliOnly !== 'true' || m.cli,
    );
    const models = (
      await Promise.all(
        listed.map(async (m) => {
          const facts = await factsOf(m);
          return facts ? cliModel(m, facts) : undefined;
        }),
      )
    ).filter((m) => m !== undefined);
    return c.json({ object: 'list', models });
  });
  // Model ids may contain slashes and colons (namespace/model:tag, Bedrock ids): the rest of the path is the id.
  app.get('/openai/v1/models/:id{.+}', async (c) => {
    const id = c.req.param('id');
    const model = visible((await deps.caller((n) => c.req.header(n))).policy).find((m) => m.id === id);
    if (!model) {
      throw new ProxyError(
        404,
        'invalid_request_error',
        'model_not_found',
        `the model ${JSON.stringify(id.slice(0, 256))} does not exist or is not listed here; GET /openai/v1/models lists the models you can use`,
        'model',
      );
    }
    return c.json(openAIModel(model, await factsOf(model)));
  });
}
