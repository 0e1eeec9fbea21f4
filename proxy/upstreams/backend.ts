import type { ModelLifecycle } from '../../crds/catalog/lifecycle.js';
import type { TokenPrice } from '../../crds/catalog/prices.js';
import type { ProxyError } from '../endpoints/errors.js';
import type { ModelFacts } from '../models/model-metadata.js';
import type { RouteEntry } from '../serving/routes.js';
import type { Upstream } from './upstream.js';

/**
 * The one contract every kind of route is served through: in-cluster models, external
 * providers' models (each provider a module of crds/providers/), and models that cannot take
 * traffic now. The pipeline reaches a route's code only through its backend (backendOf), so a
 * route's kind is looked up in one table and branched on nowhere else: not in pricing, token
 * counting, the model lists or the traces.
 */

/** Who serves a route, as callers' errors and traces name it. */
export interface Server {
  /** For messages: "in-cluster", "OpenAI", "Bedrock". */
  label: string;
  /** OpenTelemetry's gen_ai.provider.name; none for a model that cannot take traffic. */
  system?: string;
  /** The server's URL where the gateway addresses one itself (server.address of the client span). */
  address?: string;
}

export interface Backend<R extends RouteEntry = RouteEntry> extends Upstream<R> {
  who(route: R): Server;
  /** Why the route takes no call now (a model still deploying); nothing is sent then. */
  refuse?(route: R): ProxyError | undefined;
  /** Exact input tokens where the provider counts them; undefined: the gateway estimates. */
  countTokens(route: R, body: Record<string, unknown>, signal: AbortSignal): Promise<number | undefined>;
  /** The model whose limits and family apply (an inference profile's foundation model); the route's model where absent. */
  baseModel?(route: R): string;
  /** USD per 1M tokens, where the gateway has a price. */
  price(route: R): TokenPrice | undefined;
  /** When the provider deprecates and retires the model, where it publishes it; absent: not known to be going away. */
  lifecycle?(route: R): ModelLifecycle | undefined;
  /** The serving provider's free credits (its whole grant, USD), for the store to allocate. */
  credits(route: R): number;
  /** What the model can do, for the model lists; undefined for what is not listed. */
  facts(route: R): Promise<ModelFacts | undefined>;
}

export type Backends = { readonly [K in RouteEntry['kind']]: Backend<Extract<RouteEntry, { kind: K }>> };

/** A route's backend: the one place its kind picks its code. */
export const backendOf = <R extends RouteEntry>(backends: Backends, route: R): Backend<R> =>
  backends[route.kind] as unknown as Backend<R>;
