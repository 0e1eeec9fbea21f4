import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { describe, expect, it } from 'vitest';
import { frameValue, sseFrame } from './stream-reader.js';

const parsed = (text: string): EventSourceMessage[] => {
  const events: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (e) => events.push(e) });
  parser.feed(text);
  return events;
};

describe('sseFrame', () => {
  it('frames one line of data as one event a reader finds whole', () => {
    const frame = sseFrame('{"a":1}', 'response.created');
    expect(frame).toBe('event: response.created\ndata: {"a":1}\n\n');
    expect(frameValue(frame)).toEqual({ a: 1 });
  });

  it('gives each line of data a data line of its own, so that a newline cannot end the event or lose a line', () => {
    const text = sseFrame('first\n\nthird', 'note') + sseFrame('next');
    expect(parsed(text).map((e) => [e.event, e.data])).toEqual([
      ['note', 'first\n\nthird'],
      [undefined, 'next'],
    ]);
  });
});
