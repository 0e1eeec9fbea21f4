import { UnsecuredJWT } from 'jose';
import { describe, expect, it } from 'vitest';
import type { TokenReviewStatus } from '../../crds/identity/cluster-issuer.js';
import { operatorWriter } from './operator-writer.js';

const OPERATOR = 'system:serviceaccount:platform-agent:platform-ai-optimizer-operator';
const tokenOf = (sub: string, n = 0) => new UnsecuredJWT({ n }).setSubject(sub).encode();

describe('operatorWriter', () => {
  it("asks the API server only about tokens naming the operator's ServiceAccount, and keeps its answer a minute", async () => {
    const asked: string[] = [];
    let now = 0;
    let answer: TokenReviewStatus | Error = { authenticated: true, user: { username: OPERATOR } };
    const writer = operatorWriter(
      {
        review: async (token, audiences) => {
          asked.push(`${token.slice(-6)} ${audiences.join(',')}`);
          if (answer instanceof Error) throw answer;
          return answer;
        },
      },
      OPERATOR,
      () => now,
    );
    expect(await writer(tokenOf('system:serviceaccount:ml:trainer'))).toBe('other');
    expect(await writer('not a jwt')).toBe('other');
    expect(asked).toEqual([]);
    const token = tokenOf(OPERATOR);
    expect(await writer(token)).toBe('operator');
    expect(await writer(token)).toBe('operator');
    expect(asked).toHaveLength(1);
    expect(asked[0]).toMatch(/ platform-ai-optimizer$/);
    now += 61_000;
    answer = { authenticated: false };
    expect(await writer(token)).toBe('other');
    // A forged token naming the operator: the API server says no.
    expect(await writer(tokenOf(OPERATOR, 1))).toBe('other');
    answer = new Error('connect ECONNREFUSED');
    expect(await writer(tokenOf(OPERATOR, 2))).toBe('unavailable');
  });
});
