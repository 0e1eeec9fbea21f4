import { buildRoutes, RouteTable } from './routes.js';

/**
 * For tests: the route table of a standalone gateway serving one model from one server (a double
 * or a test's own HTTP server), as a ModelDeployment with an `endpoint` gives it.
 */
export function oneModelRoutes(name: string, model: string, endpoint: string): RouteTable {
  const routes = new RouteTable();
  routes.set(
    buildRoutes(
      [
        {
          apiVersion: 'ai.platform/v1beta1',
          kind: 'ModelDeployment',
          metadata: { name, namespace: 'platform-llms' },
          spec: { model, serviceName: name, port: 11434, replicas: 1, endpoint },
        },
      ],
      { standalone: true },
    ),
  );
  return routes;
}
