import { describe, expect, it } from 'vitest';
import { loadBedrockPrices, mergePrices, parseBedrockPrices } from '../../crds/catalog/prices.js';
import type { ExternalProvider } from '../../crds/external-provider.js';
import { type HostedWorld, retiringCondition, retiringEvent, withRetiringCondition } from './models-retiring.js';

const provider = (name: string, spec: Partial<ExternalProvider['spec']>): ExternalProvider => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ExternalProvider',
  metadata: { name, namespace: 'platform-agent' },
  spec: {
    provider: 'anthropic',
    displayName: name,
    auth: { method: 'APIKey', secretRef: { name: 'k' } },
    includeInCLI: true,
    streaming: true,
    models: [],
    ...spec,
  },
});

const anthropic = provider('anthropic', {
  models: ['claude-sonnet-4-5-20250929', 'claude-sonnet-5-5'],
  aliases: [{ name: 'sonnet', model: 'claude-sonnet-4-5-20250929' }],
});
const openai = provider('openai', { provider: 'openai', models: ['gpt-4o', 'gpt-5'], fallback: ['sonnet'] });
const world: HostedWorld = { deployments: [], providers: [anthropic, openai], prices: loadBedrockPrices() };
const at = (d: string) => new Date(`${d}T10:00:00Z`);

describe('ModelsRetiring', () => {
  it('names each naming of a retiring model with its field, date and replacement, aliases and fallbacks followed', () => {
    const c = retiringCondition(
      [
        { name: 'claude-sonnet-4-5-20250929', field: 'spec.models' },
        { name: 'claude-sonnet-5-5', field: 'spec.models' },
        { name: 'sonnet', field: 'spec.fallback' },
        // Not served by any provider: nothing to say of it here (Ready says it is not served).
        { name: 'claude-sonnet-4-5', field: 'spec.models' },
      ],
      world,
      at('2026-11-20'),
      4,
    );
    expect(c).toEqual({
      type: 'ModelsRetiring',
      status: 'True',
      reason: 'ModelsRetiring',
      message:
        'claude-sonnet-4-5-20250929 (spec.models) retires on 2026-11-30, in 10 days: move to claude-sonnet-5-5; ' +
        'sonnet (spec.fallback) retires on 2026-11-30, in 10 days: move to claude-sonnet-5-5; ' +
        'requests to a retired model fail at its provider',
      observedGeneration: 4,
    });
  });

  it('is absent before the 30-day window and for current models; ModelsRetired once the day has passed', () => {
    const naming = [{ name: 'sonnet', field: 'spec.models' }];
    expect(retiringCondition(naming, world, at('2026-10-30'), 1)).toBeUndefined();
    expect(retiringCondition(naming, world, at('2026-10-31'), 1)?.reason).toBe('ModelsRetiring');
    expect(retiringCondition(naming, world, at('2026-12-01'), 1)).toMatchObject({
      reason: 'ModelsRetired',
      message: expect.stringContaining('sonnet (spec.models) retired on 2026-11-30: move to claude-sonnet-5-5'),
    });
    expect(retiringCondition([{ name: 'gpt-5', field: 'spec.models' }], world, at('2026-11-29'), 1)).toBeUndefined();
  });

  it('reads a date the prices ConfigMap adds, and says so when the provider names no replacement', () => {
    const prices = mergePrices(
      world.prices,
      parseBedrockPrices('lifecycle:\n  openai:\n    gpt-4o: { deprecated: 2026-11-01, retires: 2026-12-10 }\n'),
    );
    const c = retiringCondition([{ name: 'gpt-4o', field: 'spec.models' }], { ...world, prices }, at('2026-11-29'), 1);
    expect(c?.message).toContain('gpt-4o (spec.models) retires on 2026-12-10, in 11 days: OpenAI names no replacement');
  });

  it('is taken away when nothing retires, and its Event is said once per change, not per day', () => {
    const naming = [{ name: 'sonnet', field: 'spec.models' }];
    const first = retiringCondition(naming, world, at('2026-11-20'), 1);
    const conditions = withRetiringCondition(undefined, first, at('2026-11-20'));
    expect(retiringEvent(undefined, first)?.reason).toBe('ModelsRetiring');
    // The next day: another day count, the same models: no new Event.
    expect(retiringEvent(conditions, retiringCondition(naming, world, at('2026-11-21'), 1))).toBeUndefined();
    // Retired: a new Event.
    expect(retiringEvent(conditions, retiringCondition(naming, world, at('2026-12-01'), 1))?.reason).toBe(
      'ModelsRetired',
    );
    expect(withRetiringCondition(conditions, undefined, at('2026-11-22'))).toEqual([]);
  });
});
