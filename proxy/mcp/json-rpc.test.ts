import { describe, expect, it } from 'vitest';
import { parseClientMessage as parseJson } from './json-rpc.js';

/** The body as the body stage hands it over: parsed (a body that is not JSON is refused there, as a parse error). */
const parseClientMessage = (text: string) => parseJson(JSON.parse(text));

describe('a POST body as a JSON-RPC message', () => {
  it('tells requests, notifications and responses apart', () => {
    expect(parseClientMessage('{"jsonrpc":"2.0","id":1,"method":"tools/list"}')).toMatchObject({ kind: 'request' });
    expect(parseClientMessage('{"jsonrpc":"2.0","method":"notifications/initialized"}')).toMatchObject({
      kind: 'notification',
    });
    expect(parseClientMessage('{"jsonrpc":"2.0","id":"a","result":{}}')).toMatchObject({ kind: 'response' });
  });

  it('answers what is not one with the spec’s codes', () => {
    expect(parseClientMessage('[{"jsonrpc":"2.0","id":1,"method":"ping"}]')).toMatchObject({ error: { code: -32600 } });
    expect(parseClientMessage('{"jsonrpc":"1.0","id":3,"method":"ping"}')).toMatchObject({
      id: 3,
      error: { code: -32600 },
    });
    expect(parseClientMessage('{"jsonrpc":"2.0","id":4,"method":"ping","params":[1]}')).toMatchObject({
      error: { code: -32600 },
    });
    expect(parseClientMessage('"text"')).toMatchObject({ error: { code: -32600 } });
  });
});
