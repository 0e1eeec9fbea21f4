import { describe, expect, it } from 'vitest';
import { type Checking, checkText, masked, placeholder } from './check-text.js';
import { compileDetectors } from './detectors.js';
import { Findings } from './findings.js';
import { type CompiledGuardrail, compileGuardrail } from './guardrail-set.js';

/** The built-in detectors on what people paste, each finding validated; the actions on them. */

const found = (text: string, categories?: string[]) => {
  const { detect } = compileDetectors({ builtIn: categories ? { categories: categories as never } : {} });
  return detect(text).map((s) => [s.category, text.slice(s.start, s.end)]);
};

describe('the built-in detectors', () => {
  it.each([
    ['Email', 'write to bob.smith+ml@example.co.uk today', 'bob.smith+ml@example.co.uk'],
    ['PaymentCard', 'card 4111 1111 1111 1111, exp 12/29', '4111 1111 1111 1111'],
    ['PaymentCard', 'amex 378282246310005.', '378282246310005'],
    ['PaymentCard', 'typed 4111  1111 1111 1111 twice', '4111  1111 1111 1111'],
    ['Iban', 'lower de89370400440532013000 case', 'de89370400440532013000'],
    [
      'CloudCredential',
      'AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
      'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
    ],
    ['Iban', 'pay DE89 3704 0044 0532 0130 00 now', 'DE89 3704 0044 0532 0130 00'],
    ['Iban', 'GB82WEST12345698765432', 'GB82WEST12345698765432'],
    ['NationalId', 'SSN 123-45-6789', '123-45-6789'],
    ['NationalId', 'DNI 12345678Z', '12345678Z'],
    ['NationalId', 'personnummer 811218-9876', '811218-9876'],
    ['NationalId', 'HETU 131052-308T', '131052-308T'],
    ['IpAddress', 'host 10.20.30.40 is down', '10.20.30.40'],
    ['IpAddress', 'ping 2001:db8:85a3::8a2e:370:7334', '2001:db8:85a3::8a2e:370:7334'],
    ['Phone', 'call +44 20 7946 0958', '+44 20 7946 0958'],
    ['Phone', 'call (415) 555-2671', '(415) 555-2671'],
    ['CloudCredential', 'key AKIAIOSFODNN7EXAMPLE', 'AKIAIOSFODNN7EXAMPLE'],
    [
      'CloudCredential',
      'aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
      'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
    ],
    ['CloudCredential', `maps AIza${'B'.repeat(35)}`, `AIza${'B'.repeat(35)}`],
    ['ApiToken', `token ghp_${'a1'.repeat(18)}`, `ghp_${'a1'.repeat(18)}`],
    ['ApiToken', `OPENAI_API_KEY=sk-proj-${'x9'.repeat(24)}`, `sk-proj-${'x9'.repeat(24)}`],
    ['ApiToken', 'Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123', 'abcdefghijklmnopqrstuvwxyz0123'],
    [
      'PrivateKey',
      'key:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\nthanks',
      '-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----',
    ],
  ])('find %s in %j', (category, text, expected) => {
    expect(found(text)).toContainEqual([category, expected]);
  });

  it.each([
    ['a 16-digit number failing Luhn', 'order 4111 1111 1111 1112'],
    ['an IBAN failing mod 97', 'DE89 3704 0044 0532 0130 01'],
    ['an SSN of area 000', '000-12-3456'],
    ['a DNI with the wrong letter', '12345678A'],
    ['a git SHA beside the word secret', 'secret commit 3f786850e387550fdab836ed7e6dc881de23001b'],
    ['a 40-character key with no AWS context', 'blob wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY'],
    ["C++'s scope", 'std::vector<int> and a::b'],
    ['an IPv4-like version', 'version 1.2.3.4.5'],
    ['a date', 'on 2024-01-15 at 10:30'],
    ['an address without a domain', 'user@localhost'],
    ['a timestamp', 'at 2025-06-03 14:22:01 the job ran'],
    ['a version', 'version 2.31.0.1 and v1.2.3.4 and pkg==10.2.0.1'],
    ['a path beside the word laws', 'laws: see /usr/share/docs/ABCDEFGHIJKLmnopqrst/0123456789ab'],
  ])('find nothing in %s', (_what, text) => {
    expect(found(text)).toEqual([]);
  });

  it('looks only for the categories asked', () => {
    expect(found('bob@example.com 4111111111111111', ['PaymentCard'])).toEqual([['PaymentCard', '4111111111111111']]);
  });

  it("count a team's own RE2 pattern, and skip one that does not compile, saying why", () => {
    const { detect, problems } = compileDetectors({
      patterns: [
        { name: 'EmployeeId', regex: 'EMP-[0-9]{6}' },
        { name: 'Broken', regex: '(a' },
        { name: 'Lookahead', regex: 'a(?=b)' },
      ],
    });
    expect(detect('EMP-123456 and EMP-12').map((s) => s.category)).toEqual(['EmployeeId']);
    expect(problems.map((p) => p.name)).toEqual(['Broken', 'Lookahead']);
  });
});

const guardrail = (spec: Partial<Parameters<typeof compileGuardrail>[0]['spec']>, name = 'g'): CompiledGuardrail =>
  compileGuardrail({
    apiVersion: 'ai.platform/v1beta1',
    kind: 'Guardrail',
    metadata: { name },
    spec: { detectors: { builtIn: {} }, ...spec },
  });

describe('the actions', () => {
  const check = (gs: CompiledGuardrail[], text: string) => {
    const checking: Checking = { findings: new Findings() };
    return { checked: checkText(gs, text, 'request', checking), checking };
  };

  it('Redact puts a typed placeholder, Mask keeps the last 4, and each finding is counted, not its text', () => {
    const { checked, checking } = check(
      [guardrail({ action: 'Redact', actions: [{ category: 'Email', action: 'Mask' }] })],
      'card 4111 1111 1111 1111 mail bob@example.com card 5500 0000 0000 0004',
    );
    expect(checked).toEqual({ text: 'card <PAYMENT_CARD> mail ***********.com card <PAYMENT_CARD>' });
    expect(checking.findings.list()).toEqual([
      { guardrail: 'g', category: 'PaymentCard', action: 'Redact', where: 'request', count: 2 },
      { guardrail: 'g', category: 'Email', action: 'Mask', where: 'request', count: 1 },
    ]);
    expect(JSON.stringify(checking.findings.list())).not.toContain('4111');
  });

  it('Block names the guardrail and the category; RouteInCluster marks the request and leaves the text', () => {
    expect(check([guardrail({ action: 'Block' }, 'no-keys')], 'my key AKIAIOSFODNN7EXAMPLE').checked).toEqual({
      blocked: { guardrail: 'no-keys', category: 'CloudCredential' },
    });
    const { checked, checking } = check([guardrail({ action: 'RouteInCluster' }, 'pii')], 'mail bob@example.com');
    expect(checked).toEqual({ text: 'mail bob@example.com' });
    expect(checking.inCluster).toEqual({ guardrail: 'pii', category: 'Email' });
  });

  it('composes in order: the second sees what the first left', () => {
    const first = guardrail({ action: 'Redact', detectors: { builtIn: { categories: ['Email'] } } }, 'first');
    const second = guardrail(
      { action: 'Block', detectors: { patterns: [{ name: 'Mail', regex: '<EMAIL>' }] } },
      'second',
    );
    expect(check([first, second], 'bob@example.com').checked).toEqual({
      blocked: { guardrail: 'second', category: 'Mail' },
    });
  });

  it('keep JSON text JSON: a finding outside a string becomes a string', () => {
    const checking: Checking = { findings: new Findings() };
    const checked = checkText(
      [guardrail({ action: 'Redact' })],
      '{"to": "bob@example.com", "phone": 4155552671, "note": "call \\"4155552671\\""}',
      'request',
      checking,
      { json: true },
    );
    expect('text' in checked && JSON.parse(checked.text)).toEqual({
      to: '<EMAIL>',
      phone: '<PHONE>',
      note: 'call "<PHONE>"',
    });
  });

  it('name placeholders and mask as documented', () => {
    expect(placeholder('PaymentCard')).toBe('<PAYMENT_CARD>');
    expect(placeholder('EmployeeId')).toBe('<EMPLOYEE_ID>');
    expect(masked('4111 1111 1111 1111')).toBe('**** **** **** 1111');
    expect(masked('abc')).toBe('abc');
  });
});
