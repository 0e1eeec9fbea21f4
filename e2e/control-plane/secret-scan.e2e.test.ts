import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { KINDS } from '../../crds/constants.js';
import { KIND_NAMES } from '../../crds/schema.js';
import { captureDir } from '../support/capture.js';
import { AWS_ACCOUNT_IDS, PROVIDER_SECRET_NAMES, SECRET_VALUES } from '../support/known-secrets.js';
import { kubectlOk } from '../support/kube.js';

/**
 * Runs after every other e2e suite (vitest.config.ts orders it last): everything the product
 * printed or wrote during the run (operator and proxy logs, proxy processes' output, the
 * control plane's logs, every Event and every custom resource with its status) holds no API key,
 * no AWS access key id or secret, and no prompt text. What the product writes itself (its logs,
 * Events, and the status of every custom resource) also names no ARN, AWS account id or
 * provider Secret: those appear only in the specs users wrote.
 */

/** Patterns of credentials whatever their value: gateway API keys and AWS access key ids. */
const PATTERNS: Array<[string, RegExp]> = [
  ['gateway API key', /\bsk-[A-Za-z0-9_-]{6,}/],
  ['AWS access key id', /\b(?:AKIA|ASIA)[A-Z0-9]{16}\b/],
];

function readAll(dir: string): Array<{ name: string; text: string }> {
  if (!dir || !existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((f) => f.endsWith('.log'))
    .map((f) => ({ name: `${dir}/${f}`, text: readFileSync(join(dir, f), 'utf8') }));
}

function clusterDumps(): Array<{ name: string; text: string }> {
  const kinds = KIND_NAMES.map((k) => KINDS[k].plural).join(',');
  return [
    { name: 'kubectl get events -A', text: kubectlOk(['get', 'events', '-A', '-o', 'json']) },
    { name: `kubectl get ${kinds} -A`, text: kubectlOk(['get', kinds, '-A', '-o', 'json']) },
    { name: 'kubectl get configmaps,leases -A', text: kubectlOk(['get', 'configmaps,leases', '-A', '-o', 'json']) },
  ];
}

function findings(sources: Array<{ name: string; text: string }>): string[] {
  const found: string[] = [];
  for (const { name, text } of sources) {
    for (const [what, pattern] of PATTERNS) {
      const m = pattern.exec(text);
      if (m) found.push(`${what} in ${name}: ...${text.slice(Math.max(0, m.index - 80), m.index + 4)}****`);
    }
    for (const value of SECRET_VALUES) {
      if (text.includes(value)) found.push(`known secret or prompt text ${value.slice(0, 4)}**** in ${name}`);
    }
  }
  return found;
}

/** The product's own words: its logs, Event messages and the status of every custom resource. */
function productWords(): Array<{ name: string; text: string }> {
  const kinds = KIND_NAMES.map((k) => KINDS[k].plural).join(',');
  const resources = JSON.parse(kubectlOk(['get', kinds, '-A', '-o', 'json'])) as {
    items: Array<{ kind: string; metadata: { namespace?: string; name: string }; status?: unknown }>;
  };
  const events = JSON.parse(kubectlOk(['get', 'events', '-A', '-o', 'json'])) as {
    items: Array<{ reason?: string; message?: string; source?: { component?: string } }>;
  };
  return [
    ...readAll(captureDir() ?? ''),
    ...resources.items.map((r) => ({
      name: `status of ${r.kind} ${r.metadata.namespace ?? ''}/${r.metadata.name}`,
      text: JSON.stringify(r.status ?? {}),
    })),
    {
      name: 'messages of our Events',
      text: events.items
        .filter((e) => e.source?.component?.startsWith('platform-ai-optimizer'))
        .map((e) => `${e.reason} ${e.message}`)
        .join('\n'),
    },
  ];
}

function nameFindings(sources: Array<{ name: string; text: string }>): string[] {
  const found: string[] = [];
  for (const { name, text } of sources) {
    const arn = /arn:aws[a-z-]*:/.exec(text);
    if (arn) found.push(`an ARN in ${name}: ...${text.slice(Math.max(0, arn.index - 80), arn.index + 12)}`);
    for (const account of AWS_ACCOUNT_IDS) {
      if (text.includes(account)) found.push(`AWS account id ${account.slice(0, 3)}*** in ${name}`);
    }
    for (const secret of PROVIDER_SECRET_NAMES) {
      const at = text.indexOf(secret);
      if (at >= 0) found.push(`Secret name ${secret} in ${name}: ...${text.slice(Math.max(0, at - 80), at)}`);
    }
  }
  return found;
}

describe('secret scan of everything the e2e run captured', () => {
  it('captured the product output of the run (the scan has something to look at)', () => {
    const captured = readAll(captureDir() ?? '');
    expect(captured.map((c) => c.name).length).toBeGreaterThan(3);
    expect(captured.reduce((n, c) => n + c.text.length, 0)).toBeGreaterThan(10_000);
    // The operators logged their reconciles: the capture is the product's real log output.
    expect(captured.some((c) => c.text.includes('"component":"operator'))).toBe(true);
  });

  it('finds no API key, AWS key, AWS secret or prompt text in logs, events or resources', () => {
    const sources = [...readAll(captureDir() ?? ''), ...readAll(inject('controlPlaneLogs')), ...clusterDumps()];
    expect(findings(sources)).toEqual([]);
  });

  it('finds no ARN, AWS account id or provider Secret name in logs, Events or statuses', () => {
    const words = productWords();
    // The run did produce statuses and Events for providers whose credentials failed.
    expect(words.some((w) => w.text.includes('SecretNotFound'))).toBe(true);
    expect(words.some((w) => w.text.includes('AssumeRoleDenied'))).toBe(true);
    expect(nameFindings(words)).toEqual([]);
  });

  it('would notice a leak: the scan flags each kind of secret planted in a sample', () => {
    const planted = [
      `{"msg":"request failed","key":"sk-${'a'.repeat(20)}"}`,
      '{"msg":"assumed role","id":"ASIA1234567890ABCDEF"}',
      ...SECRET_VALUES.map((v) => `{"msg":"oops","value":"${v}"}`),
    ];
    expect(findings(planted.map((text, i) => ({ name: `sample ${i}`, text })))).toHaveLength(planted.length);
    const named = [
      '{"msg":"assume failed","role":"arn:aws:iam::000000000000:role/x"}',
      ...AWS_ACCOUNT_IDS.map((a) => `account ${a}`),
      ...PROVIDER_SECRET_NAMES.map((n) => `{"message":"Secret ${n} was not found"}`),
    ];
    expect(nameFindings(named.map((text, i) => ({ name: `sample ${i}`, text })))).toHaveLength(named.length);
  });
});
