import { describe, expect, it } from 'vitest';
import { foldedBetas, foldSystemMessages, MID_CONVERSATION_SYSTEM_BETA } from './anthropic-system-messages.js';

describe('foldSystemMessages', () => {
  it('leaves a body without system messages as the very object it was', () => {
    const body = { system: 'be brief', messages: [{ role: 'user', content: 'hi' }] };
    expect(foldSystemMessages(body)).toBe(body);
  });

  it("appends each system message's text to system, in order, and keeps the turns around them", () => {
    const body = {
      model: 'm',
      system: 'You are Claude Code.',
      messages: [
        { role: 'user', content: 'find the bug' },
        { role: 'system', content: 'Use the Agent tool for searches.' },
        { role: 'assistant', content: 'on it' },
        { role: 'system', content: [{ type: 'text', text: 'Skill: debugging' }] },
        { role: 'user', content: 'go' },
      ],
    };
    expect(foldSystemMessages(body)).toEqual({
      model: 'm',
      system: 'You are Claude Code.\n\nUse the Agent tool for searches.\n\nSkill: debugging',
      messages: [
        { role: 'user', content: 'find the bug' },
        { role: 'assistant', content: 'on it' },
        { role: 'user', content: 'go' },
      ],
    });
    // The caller's body is not changed under it (a retry or fallback sends it again).
    expect(body.messages).toHaveLength(5);
  });

  it('keeps blocks as blocks where one says more than its text (a cache breakpoint)', () => {
    const cached = { type: 'text', text: 'long rules', cache_control: { type: 'ephemeral' } };
    const out = foldSystemMessages({
      messages: [
        { role: 'system', content: [cached] },
        { role: 'user', content: 'hi' },
      ],
    });
    expect(out.system).toEqual([cached]);
    expect(out.messages).toEqual([{ role: 'user', content: 'hi' }]);
  });

  it("drops the mid-conversation-system beta with what it announced, and keeps the caller's others", () => {
    expect(foldedBetas([MID_CONVERSATION_SYSTEM_BETA, 'context-1m-2025-08-07'])).toEqual(['context-1m-2025-08-07']);
    const untouched = ['context-1m-2025-08-07'];
    expect(foldedBetas(untouched)).toBe(untouched);
  });
});
