import { describe, expect, it } from 'vitest';
import type { Guardrail } from '../../crds/guardrail.js';
import type { Checker, GuardrailCalls, Verdict } from './checker.js';
import { Findings } from './findings.js';
import { compileGuardrail } from './guardrail-set.js';
import { judgeTexts } from './judging.js';
import type { MapText } from './request-texts.js';

const calls: GuardrailCalls = {
  chat: () => Promise.reject(new Error('none')),
  embed: () => Promise.reject(new Error('none')),
  post: () => Promise.reject(new Error('none')),
};

/** A checker that records what it was asked and answers `verdict`. */
function checker(
  name: string,
  flags: { local: boolean; leaves: boolean },
  verdict: Verdict,
  asked: string[][],
): Checker {
  return {
    name,
    onFailure: 'Block',
    ...flags,
    check: async (texts) => {
      asked.push([...texts]);
      return verdict;
    },
  };
}

const guardrail = (name: string, checkers: Checker[]) => {
  const spec: Guardrail['spec'] = { detectors: { builtIn: { categories: [] } }, action: 'Redact' };
  return {
    ...compileGuardrail({ apiVersion: 'ai.platform/v1beta1', kind: 'Guardrail', metadata: { name }, spec }),
    checkers,
  };
};
const texts = (body: string[], f: MapText) => body.map((t) => f(t));

describe("a body's judges and services", () => {
  it("ask the company's own services first: what they redact never reaches a provider's service", async () => {
    const asked = { local: [] as string[][], remote: [] as string[][] };
    const g = guardrail('g', [
      checker('service/moderation', { local: false, leaves: true }, { whole: [], found: [] }, asked.remote),
      checker(
        'service/presidio',
        { local: true, leaves: false },
        { whole: [], found: [{ text: 'jane@example.com', category: 'EmailAddress' }] },
        asked.local,
      ),
    ]);
    const checking = { findings: new Findings() };
    const judged = await judgeTexts([g], texts, ['mail jane@example.com'], 'request', checking, calls, () => {});
    expect(judged).toEqual({ body: ['mail <EMAIL_ADDRESS>'] });
    expect(asked).toEqual({ local: [['mail jane@example.com']], remote: [['mail <EMAIL_ADDRESS>']] });
  });

  it("do not send a request kept in the cluster to a provider's service: its onFailure decides", async () => {
    const asked: string[][] = [];
    const g = guardrail('g', [
      checker('service/bedrock', { local: false, leaves: true }, { whole: [], found: [] }, asked),
    ]);
    const checking = { findings: new Findings(), inCluster: { guardrail: 'pii', category: 'NationalId' } };
    const failed: string[] = [];
    const judged = await judgeTexts([g], texts, ['my id'], 'request', checking, calls, (_g, d, why) =>
      failed.push(`${d}: ${why}`),
    );
    expect(asked).toEqual([]);
    expect(failed).toEqual(['service/bedrock: not asked: the request stays in the cluster']);
    expect(judged).toEqual({
      unavailable: { guardrail: 'g', category: 'service/bedrock' },
      why: 'not asked: the request stays in the cluster',
    });
  });
});
