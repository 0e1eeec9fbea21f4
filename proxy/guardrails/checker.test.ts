import { describe, expect, it } from 'vitest';
import { categoryOf } from './checker.js';
import { occurrences } from './spans.js';

describe("a service's category", () => {
  it.each([
    ['CREDIT_DEBIT_CARD_NUMBER', 'CreditDebitCardNumber'],
    ['EMAIL_ADDRESS', 'EmailAddress'],
    ['self-harm/intent', 'SelfHarmIntent'],
    ['harassment', 'Harassment'],
    ['Investment advice', 'InvestmentAdvice'],
    ['PROMPT_ATTACK', 'PromptAttack'],
    ['employee-id', 'EmployeeId'],
    ['9lives', 'X9lives'],
  ])('%s is %s, as spec.actions names categories', (name, category) => {
    expect(categoryOf(name)).toBe(category);
  });
});

describe('where found strings occur', () => {
  const detect = occurrences([
    { text: 'Al', category: 'Person' },
    { text: 'jane@example.com', category: 'EmailAddress' },
    { text: 'example.com', category: 'Url' },
    { text: 'x', category: 'TooShort' },
  ]);

  it('finds every occurrence, never inside a longer word, the longer of two overlapping', () => {
    const text = 'Al wrote to jane@example.com; Alice and Al met at example.com, x marks it';
    const spans = detect(text).map((s) => [text.slice(s.start, s.end), s.category]);
    expect(spans).toEqual([
      ['Al', 'Person'],
      ['jane@example.com', 'EmailAddress'],
      ['Al', 'Person'],
      ['example.com', 'Url'],
    ]);
  });
});
