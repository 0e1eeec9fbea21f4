import { Hono } from 'hono';
import { type Catalog, type ClusterInfo, hostedModels } from '../crds/catalog/catalog.js';

/**
 * The management API of this cluster's operator:
 * GET /ai-optimizer/v1beta/organizations/{organizationId}/clusters/{clusterId}/hosted-models
 * answers for this cluster only; any other organization or cluster id is 404.
 */
export function managementApi(catalog: Catalog, cluster: ClusterInfo): Hono {
  const app = new Hono();
  app.get('/ai-optimizer/v1beta/organizations/:organizationId/clusters/:clusterId/hosted-models', (c) => {
    const { organizationId, clusterId } = c.req.param();
    if (organizationId !== cluster.organizationId || clusterId !== cluster.clusterId) {
      return c.json(
        {
          error: {
            message: `cluster ${clusterId.slice(0, 64)} of organization ${organizationId.slice(0, 64)} is not managed by this operator; check both ids`,
            type: 'not_found',
            code: 'cluster_not_found',
          },
        },
        404,
      );
    }
    return c.json({
      organizationId,
      clusterId,
      cloud: cluster.cloud,
      region: cluster.region,
      items: hostedModels(catalog, cluster),
    });
  });
  return app;
}
