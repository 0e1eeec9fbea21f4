import { describe, expect, it } from 'vitest';
import { loadBedrockPrices } from '../../crds/catalog/prices.js';
import type { ExternalProvider, ExternalProviderStatus } from '../../crds/external-provider.js';
import { listed } from '../../crds/providers/provider.js';
import { type HostedOutcome, hostedProviderStatus } from './hosted-provider-status.js';

/** A hosted provider's status as a pure function of one discovery attempt and the status before it. */

const NOW = new Date('2026-11-26T12:00:00Z');
const prices = loadBedrockPrices();

const provider = (models: string[], status?: ExternalProviderStatus): ExternalProvider => ({
  apiVersion: 'ai.platform/v1beta1',
  kind: 'ExternalProvider',
  metadata: { name: 'p', namespace: 'platform-agent', generation: 2 },
  spec: {
    provider: 'anthropic',
    displayName: 'p',
    auth: { method: 'APIKey', secretRef: { name: 's' } },
    includeInCLI: false,
    streaming: true,
    models,
  },
  ...(status ? { status } : {}),
});

const ready = hostedProviderStatus(
  provider(['claude-sonnet-4-5']),
  { ok: true, models: [listed('claude-sonnet-4-5-20250929')], keyLast4: 'abcd' },
  NOW,
  prices,
);
const cond = (s: ExternalProviderStatus, type: string) => s.conditions?.find((c) => c.type === type);

describe('hosted provider status', () => {
  it('Ready: the selected alias available under its own name, priced, the key by its last 4', () => {
    expect(ready).toMatchObject({
      phase: 'Ready',
      availableModels: ['claude-sonnet-4-5', 'claude-sonnet-4-5-20250929'],
      models: [{ id: 'claude-sonnet-4-5', type: 'Text', family: 'anthropic', priced: true }],
      accessKeyLast4: 'abcd',
      lastDiscoveryTime: '2026-11-26T12:00:00Z',
    });
  });

  const transient: HostedOutcome = {
    ok: false,
    problem: { reason: 'ProviderUnavailable', credentials: false, message: 'Anthropic failed (529): Overloaded' },
  };

  it('a moment of overload keeps a Ready provider routable, and says discovery retries', () => {
    const next = hostedProviderStatus(provider(['claude-sonnet-4-5'], ready), transient, NOW, prices);
    expect(next.phase).toBe('Ready');
    expect(next.models).toEqual(ready.models);
    expect(cond(next, 'ModelsAvailable')).toMatchObject({ status: 'Unknown', reason: 'ProviderUnavailable' });
    expect(cond(next, 'ModelsAvailable')?.message).toContain('retries in 30 s');
    expect(cond(next, 'Ready')?.status).toBe('True');
  });

  it('the same failure with nothing found before is Failed', () => {
    expect(hostedProviderStatus(provider(['claude-sonnet-4-5']), transient, NOW, prices).phase).toBe('Failed');
  });

  it('a refused key fails at once, even a provider that was Ready', () => {
    const next = hostedProviderStatus(
      provider(['claude-sonnet-4-5'], ready),
      { ok: false, problem: { reason: 'InvalidAPIKey', credentials: true, message: 'refused' } },
      NOW,
      prices,
    );
    expect(next.phase).toBe('Failed');
    expect(cond(next, 'CredentialsValid')).toMatchObject({ status: 'False', reason: 'InvalidAPIKey' });
  });

  it('keeps every selected model within the 1000 ids of availableModels', () => {
    const many = Array.from({ length: 1500 }, (_, i) => listed(`a-model-${String(i).padStart(4, '0')}`));
    const next = hostedProviderStatus(
      provider(['z-selected', 'claude-haiku-4-5']),
      { ok: true, models: [...many, listed('z-selected'), listed('claude-haiku-4-5-20251001')] },
      NOW,
      prices,
    );
    expect(next.availableModels).toHaveLength(1000);
    expect(next.availableModels).toEqual(expect.arrayContaining(['z-selected', 'claude-haiku-4-5']));
    expect(next.phase).toBe('Ready');
    expect(cond(next, 'ModelsPriced')).toMatchObject({ status: 'False', reason: 'UnpricedModels' });
  });
});
