import { AGENT_NAMESPACE, LLMS_NAMESPACE } from '../../crds/constants.js';
import { type ControllerDeclaration, watchesOf } from './controller-declaration.js';

/**
 * A permission the operator needs, as a Kubernetes PolicyRule with where it is granted and why.
 * The chart's operator RBAC (charts/platform-ai-optimizer/templates/rbac-operator.yaml) must grant
 * each (controllers.rbac.test.ts checks it both ways).
 */

/** The ClusterRole, or the Role of one of the two namespaces the operator works in. */
type RbacScope = 'cluster' | typeof LLMS_NAMESPACE | typeof AGENT_NAMESPACE;

const NAMESPACE_SCOPES: Record<string, RbacScope> = {
  [LLMS_NAMESPACE]: LLMS_NAMESPACE,
  [AGENT_NAMESPACE]: AGENT_NAMESPACE,
};

/** A watch of every namespace needs the ClusterRole; of one namespace, that namespace's Role. */
function scopeOf(namespace: string | undefined): RbacScope {
  if (namespace === undefined) return 'cluster';
  const scope = NAMESPACE_SCOPES[namespace];
  if (!scope) throw new Error(`the chart grants the operator nothing in namespace ${namespace}`);
  return scope;
}

export interface RbacRule {
  scope: RbacScope;
  apiGroups: string[];
  resources: string[];
  verbs: string[];
  resourceNames?: string[];
  /** Only the objects a chart value lists (`.Values.<name>`), granted per install by name. */
  resourceNamesFromValue?: string;
  /** One line: what needs it. */
  reason: string;
}

/**
 * Every rule a controller needs: those it declares, and reading each collection it watches:
 * get, list and watch, the reader grant of a watched kind as kubebuilder's RBAC markers write it
 * (the informers themselves list and watch).
 */
export function controllerRules(d: ControllerDeclaration): RbacRule[] {
  const watched = watchesOf(d).map(
    ({ collection: c }): RbacRule => ({
      scope: scopeOf(c.namespace),
      apiGroups: [c.group],
      resources: [c.plural],
      verbs: ['get', 'list', 'watch'],
      reason: `the ${d.name} controller watches ${c.plural}`,
    }),
  );
  return [...d.rbac, ...watched];
}
