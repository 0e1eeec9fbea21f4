import { readFileSync } from 'node:fs';
import yaml from 'js-yaml';
import { describe, expect, it } from 'vitest';
import { AGENT_NAMESPACE, LLMS_NAMESPACE } from '../crds/constants.js';
import { CONTROLLERS, PROCESS_RBAC } from './controllers.js';
import { controllerRules, type RbacRule } from './runtime/rbac-rule.js';

/**
 * The chart's operator RBAC grants exactly what the controllers and the process declare: every
 * declared rule is granted (a controller cannot start needing what an install refuses), and
 * every grant is declared (the chart grants nothing no declaration asks for, with its reason).
 *
 * Why the checked-in template is parsed rather than generated from the declarations: it is Helm
 * (labels from helpers, namespaces from includes, Secrets by names from values inside a `with`),
 * written and reviewed as YAML with a comment per grant; a generator would have to reproduce
 * that templating. Parsing needs only the few Helm expressions it uses, each mapped below; an
 * unknown one fails the test, so a new construct is mapped deliberately, never skipped.
 */

const TEMPLATE = 'charts/platform-ai-optimizer/templates/rbac-operator.yaml';

/** What the template's inline expressions render to (the helpers define fixed namespaces). */
const EXPRESSIONS: Record<string, string> = {
  'include "pao.agentNamespace" .': AGENT_NAMESPACE,
  'include "pao.llmsNamespace" .': LLMS_NAMESPACE,
};

/** Names granted by a chart value stand for themselves: `values:<name>`. */
const fromValue = (name: string): string => `values:${name}`;

/**
 * The template as YAML: action lines ({{- with }}, {{- end }}, {{- include ... | nindent }})
 * dropped, inline expressions rendered; `{{ toJson . }}` inside `with .Values.<name>` is that
 * value's names.
 */
function withoutHelm(template: string): string {
  const blocks: string[] = [];
  return template
    .split('\n')
    .flatMap((line) => {
      const action = /^\s*\{\{-?\s*(.*?)\s*-?\}\}\s*$/.exec(line)?.[1];
      if (action !== undefined) {
        if (/^(if|with|range)\b/.test(action)) blocks.push(/^with \.Values\.(\w+)$/.exec(action)?.[1] ?? '');
        else if (action === 'end') blocks.pop();
        return [];
      }
      return [
        line.replace(/\{\{-?\s*(.*?)\s*-?\}\}/g, (_, expr: string) => {
          const value = blocks.at(-1);
          if (expr === 'toJson .' && value) return JSON.stringify([fromValue(value)]);
          const rendered = EXPRESSIONS[expr];
          if (rendered === undefined) throw new Error(`${TEMPLATE}: map {{ ${expr} }} in this test`);
          return rendered;
        }),
      ];
    })
    .join('\n');
}

interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
  resourceNames?: string[];
}

interface RoleDocument {
  kind: string;
  metadata: { namespace?: string };
  rules?: PolicyRule[];
}

/** One verb on one resource (or one named object, `*` for all) in one scope. */
type Atom = string;

function atoms(scope: string, rule: PolicyRule): Atom[] {
  const names = rule.resourceNames ?? ['*'];
  return rule.apiGroups.flatMap((g) =>
    rule.resources.flatMap((r) =>
      rule.verbs.flatMap((v) => names.map((n) => `${scope} ${g || 'core'}/${r} ${v} ${n}`)),
    ),
  );
}

function granted(): Set<Atom> {
  const docs = yaml.loadAll(withoutHelm(readFileSync(TEMPLATE, 'utf8'))) as RoleDocument[];
  const roles = docs.filter((d) => d.kind === 'ClusterRole' || d.kind === 'Role');
  return new Set(
    roles.flatMap((d) =>
      (d.rules ?? []).flatMap((r) => atoms(d.kind === 'ClusterRole' ? 'cluster' : (d.metadata.namespace ?? ''), r)),
    ),
  );
}

const declaredAtoms = (rule: RbacRule): Atom[] =>
  atoms(rule.scope, {
    ...rule,
    ...(rule.resourceNamesFromValue ? { resourceNames: [fromValue(rule.resourceNamesFromValue)] } : {}),
  });

const declared: Array<{ who: string; rule: RbacRule }> = [
  ...PROCESS_RBAC.map((rule) => ({ who: 'the operator process', rule })),
  ...CONTROLLERS.flatMap((d) => controllerRules(d).map((rule) => ({ who: `the ${d.name} controller`, rule }))),
];

describe("the chart's operator RBAC", () => {
  const grants = granted();

  it('grants every rule a controller or the process declares', () => {
    const missing = declared.flatMap(({ who, rule }) =>
      declaredAtoms(rule)
        // A grant of every object of a resource covers a need for some of them.
        .filter((a) => !grants.has(a) && !grants.has(a.replace(/ [^ ]+$/, ' *')))
        .map((a) => `${a}: ${who}, ${rule.reason}`),
    );
    expect(missing).toEqual([]);
  });

  it('grants nothing that no declaration asks for', () => {
    const asked = new Set(declared.flatMap(({ rule }) => declaredAtoms(rule)));
    expect([...grants].filter((a) => !asked.has(a))).toEqual([]);
  });

  it('is read whole: both namespaces, the cluster, and the Secrets the install lists by name', () => {
    const scopes = new Set([...grants].map((a) => a.split(' ')[0]));
    expect([...scopes].sort()).toEqual(['cluster', AGENT_NAMESPACE, LLMS_NAMESPACE].sort());
    expect(grants).toContain(`${AGENT_NAMESPACE} core/secrets watch values:providerSecrets`);
    // Secrets are never readable by all names: an empty resourceNames would grant every one.
    expect([...grants].filter((a) => / core\/secrets (get|list|watch) \*$/.test(a))).toEqual([]);
  });
});
