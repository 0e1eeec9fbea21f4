import { describe, expect, it } from 'vitest';
import { honoured, passes, requestedFilter } from './listen.js';

const listen = (notifications: unknown) => ({
  jsonrpc: '2.0' as const,
  id: 'listen:1',
  method: 'subscriptions/listen',
  params: { notifications } as Record<string, unknown>,
});

describe('subscriptions/listen', () => {
  it('reads the filter asked for, and needs one', () => {
    expect(
      requestedFilter(listen({ toolsListChanged: true, promptsListChanged: false, resourceSubscriptions: ['a', 3] })),
    ).toEqual({
      toolsListChanged: true,
      resourceSubscriptions: ['a'],
    });
    expect(requestedFilter({ jsonrpc: '2.0', id: 1, method: 'subscriptions/listen', params: {} })).toBeUndefined();
    expect(
      requestedFilter(listen({ resourceSubscriptions: Array.from({ length: 5000 }, (_, i) => `u${i}`) }))
        ?.resourceSubscriptions,
    ).toHaveLength(1000);
  });

  it('honours what the servers offer, nothing more', () => {
    const asked = {
      toolsListChanged: true,
      resourcesListChanged: true,
      resourceSubscriptions: ['docs+file:///a'],
    } as const;
    expect(
      honoured(
        { ...asked, resourceSubscriptions: [...asked.resourceSubscriptions] },
        { tools: { listChanged: true }, resources: {} },
      ),
    ).toEqual({
      toolsListChanged: true,
    });
    expect(
      honoured(
        { ...asked, resourceSubscriptions: [...asked.resourceSubscriptions] },
        { resources: { subscribe: true, listChanged: true } },
      ),
    ).toEqual({ resourcesListChanged: true, resourceSubscriptions: ['docs+file:///a'] });
  });

  it('lets through the changes asked for and the updates of watched resources only', () => {
    const filter = { toolsListChanged: true as const, resourceSubscriptions: ['docs+file:///a'] };
    expect(passes(filter, { jsonrpc: '2.0', method: 'notifications/tools/list_changed' })).toBe(true);
    expect(passes(filter, { jsonrpc: '2.0', method: 'notifications/prompts/list_changed' })).toBe(false);
    expect(
      passes(filter, { jsonrpc: '2.0', method: 'notifications/resources/updated', params: { uri: 'docs+file:///a' } }),
    ).toBe(true);
    expect(
      passes(filter, { jsonrpc: '2.0', method: 'notifications/resources/updated', params: { uri: 'docs+file:///b' } }),
    ).toBe(false);
    expect(passes(filter, { jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info' } })).toBe(false);
  });
});
