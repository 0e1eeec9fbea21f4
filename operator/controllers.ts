import { AGENT_NAMESPACE } from '../crds/constants.js';
import { apiKeyController } from './api-key/api-key-controller.js';
import { AUDIT_RBAC } from './audit/audit-trail.js';
import { budgetController } from './budget/budget-controller.js';
import { externalProviderController } from './external-provider/external-provider-controller.js';
import { guardrailController } from './guardrail/guardrail-controller.js';
import { identityProviderController } from './identity-provider/identity-provider-controller.js';
import { mcpServerController } from './mcp-server/mcp-server-controller.js';
import { modelDeploymentController } from './model-deployment/model-deployment-controller.js';
import { routingPolicyController } from './routing-policy/routing-policy-controller.js';
import type { ControllerDeclaration } from './runtime/controller-declaration.js';
import type { RbacRule } from './runtime/rbac-rule.js';

/**
 * The operator's controllers, started in this order while this replica leads. A new kind is its
 * controller's declaration (operator/<kind>/) and one line here; its RBAC is checked against
 * the chart's by controllers.rbac.test.ts.
 */
export const CONTROLLERS: readonly ControllerDeclaration[] = [
  modelDeploymentController,
  externalProviderController,
  apiKeyController,
  budgetController,
  mcpServerController,
  routingPolicyController,
  identityProviderController,
  guardrailController,
];

/** What the operator process needs itself, apart from any controller. */
export const PROCESS_RBAC: readonly RbacRule[] = [
  {
    scope: 'cluster',
    apiGroups: [''],
    resources: ['nodes'],
    verbs: ['list'],
    reason: 'region detection from node labels, when no --region is given (main.ts)',
  },
  {
    scope: AGENT_NAMESPACE,
    apiGroups: ['coordination.k8s.io'],
    resources: ['leases'],
    verbs: ['get', 'create', 'update'],
    reason: 'leader election: one replica runs the controllers',
  },
  ...AUDIT_RBAC,
];
