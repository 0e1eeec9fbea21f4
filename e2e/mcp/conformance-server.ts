import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import {
  type CallToolResult,
  type EventStore,
  type GetPromptResult,
  type JSONRPCMessage,
  type ReadResourceResult,
  Server,
  type ServerContext,
  type Tool,
  WebStandardStreamableHTTPServerTransport,
} from '@modelcontextprotocol/server';

/**
 * The server the MCP conformance suite (@modelcontextprotocol/conformance, e2e/clients) measures:
 * every tool, resource and prompt its 32 server scenarios ask for, as each scenario's own
 * description states them, on the official TypeScript SDK's Streamable HTTP transport with an
 * event store (resumable streams). The suite's reference server lives in its repository, not in
 * its npm package; this one is written from the package's scenario descriptions.
 */

const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
/** A WAV header with no samples: the smallest audio there is. */
const WAV = (() => {
  const b = Buffer.alloc(44);
  b.write('RIFF', 0, 'latin1');
  b.writeUInt32LE(36, 4);
  b.write('WAVEfmt ', 8, 'latin1');
  b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20);
  b.writeUInt16LE(1, 22);
  b.writeUInt32LE(8000, 24);
  b.writeUInt32LE(16000, 28);
  b.writeUInt16LE(2, 32);
  b.writeUInt16LE(16, 34);
  b.write('data', 36, 'latin1');
  b.writeUInt32LE(0, 40);
  return b.toString('base64');
})();

type Json = Record<string, unknown>;
const text = (t: string): CallToolResult => ({ content: [{ type: 'text', text: t }] });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const noArgs = { type: 'object' as const, properties: {} };
const stringArg = (name: string, description: string) => ({
  type: 'object' as const,
  properties: { [name]: { type: 'string', description } },
  required: [name],
});

const TOOLS: Tool[] = [
  { name: 'test_simple_text', description: 'Returns simple text', inputSchema: noArgs },
  { name: 'test_image_content', description: 'Returns an image', inputSchema: noArgs },
  { name: 'test_audio_content', description: 'Returns audio', inputSchema: noArgs },
  { name: 'test_embedded_resource', description: 'Returns an embedded resource', inputSchema: noArgs },
  { name: 'test_multiple_content_types', description: 'Returns text, an image and a resource', inputSchema: noArgs },
  { name: 'test_tool_with_logging', description: 'Logs three messages while it runs', inputSchema: noArgs },
  { name: 'test_tool_with_progress', description: 'Reports progress while it runs', inputSchema: noArgs },
  { name: 'test_error_handling', description: 'Always fails', inputSchema: noArgs },
  { name: 'test_sampling', description: 'Asks the client to sample', inputSchema: stringArg('prompt', 'The prompt') },
  {
    name: 'test_elicitation',
    description: 'Asks the user for input',
    inputSchema: stringArg('message', 'The message to show the user'),
  },
  { name: 'test_elicitation_sep1034_defaults', description: 'Elicitation with defaults', inputSchema: noArgs },
  { name: 'test_elicitation_sep1330_enums', description: 'Elicitation with every enum form', inputSchema: noArgs },
  { name: 'test_reconnection', description: 'Closes its stream before answering', inputSchema: noArgs },
  {
    name: 'json_schema_2020_12_tool',
    description: 'Tool with JSON Schema 2020-12 features',
    inputSchema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object' as const,
      $defs: {
        address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } },
      },
      properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
      additionalProperties: false,
    },
  },
];

const ELICIT_DEFAULTS = {
  type: 'object',
  properties: {
    name: { type: 'string', description: 'User name', default: 'John Doe' },
    age: { type: 'integer', description: 'User age', default: 30 },
    score: { type: 'number', description: 'User score', default: 95.5 },
    status: { type: 'string', description: 'User status', enum: ['active', 'inactive', 'pending'], default: 'active' },
    verified: { type: 'boolean', description: 'Verification status', default: true },
  },
};

const ELICIT_ENUMS = {
  type: 'object',
  properties: {
    untitledSingle: { type: 'string', enum: ['option1', 'option2', 'option3'] },
    titledSingle: {
      type: 'string',
      oneOf: [
        { const: 'value1', title: 'First Option' },
        { const: 'value2', title: 'Second Option' },
        { const: 'value3', title: 'Third Option' },
      ],
    },
    legacyEnum: {
      type: 'string',
      enum: ['opt1', 'opt2', 'opt3'],
      enumNames: ['Option One', 'Option Two', 'Option Three'],
    },
    untitledMulti: { type: 'array', items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
    titledMulti: {
      type: 'array',
      items: {
        anyOf: [
          { const: 'value1', title: 'First Choice' },
          { const: 'value2', title: 'Second Choice' },
          { const: 'value3', title: 'Third Choice' },
        ],
      },
    },
  },
};

async function elicit(
  ctx: ServerContext,
  message: string,
  requestedSchema: Json,
  label: string,
): Promise<CallToolResult> {
  const r = await ctx.mcpReq.send({ method: 'elicitation/create', params: { message, requestedSchema } });
  return text(`${label}: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
}

/** tools/call, by tool name. */
const CALLS: Record<string, (args: Json, ctx: ServerContext) => Promise<CallToolResult> | CallToolResult> = {
  test_simple_text: () => text('This is a simple text response for testing.'),
  test_image_content: () => ({ content: [{ type: 'image', data: PNG, mimeType: 'image/png' }] }),
  test_audio_content: () => ({ content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] }),
  test_embedded_resource: () => ({
    content: [
      {
        type: 'resource',
        resource: {
          uri: 'test://embedded-resource',
          mimeType: 'text/plain',
          text: 'This is an embedded resource content.',
        },
      },
    ],
  }),
  test_multiple_content_types: () => ({
    content: [
      { type: 'text', text: 'Multiple content types test:' },
      { type: 'image', data: PNG, mimeType: 'image/png' },
      {
        type: 'resource',
        resource: {
          uri: 'test://mixed-content-resource',
          mimeType: 'application/json',
          text: JSON.stringify({ test: 'data', value: 123 }),
        },
      },
    ],
  }),
  test_tool_with_logging: async (_args, ctx) => {
    await ctx.mcpReq.log('info', 'Tool execution started');
    await sleep(50);
    await ctx.mcpReq.log('info', 'Tool processing data');
    await sleep(50);
    await ctx.mcpReq.log('info', 'Tool execution completed');
    return text('Tool with logging executed successfully');
  },
  test_tool_with_progress: async (_args, ctx) => {
    const token = ctx.mcpReq._meta?.progressToken;
    for (const progress of [0, 50, 100]) {
      if (token !== undefined)
        await ctx.mcpReq.notify({
          method: 'notifications/progress',
          params: { progressToken: token, progress, total: 100 },
        });
      if (progress < 100) await sleep(50);
    }
    return text('Tool with progress executed successfully');
  },
  test_error_handling: () => ({
    isError: true,
    content: [{ type: 'text', text: 'This tool intentionally returns an error for testing' }],
  }),
  test_sampling: async (args, ctx) => {
    const r = await ctx.mcpReq.send({
      method: 'sampling/createMessage',
      params: {
        messages: [{ role: 'user', content: { type: 'text', text: String(args.prompt ?? '') } }],
        maxTokens: 100,
      },
    });
    const content = r.content as { type?: string; text?: string };
    return text(`LLM response: ${content.type === 'text' ? content.text : JSON.stringify(content)}`);
  },
  test_elicitation: (args, ctx) =>
    elicit(
      ctx,
      String(args.message ?? ''),
      {
        type: 'object',
        properties: {
          username: { type: 'string', description: "User's response" },
          email: { type: 'string', description: "User's email address" },
        },
        required: ['username', 'email'],
      },
      'User response',
    ),
  test_elicitation_sep1034_defaults: (_args, ctx) =>
    elicit(ctx, 'Please review and update the form fields with defaults', ELICIT_DEFAULTS, 'Elicitation completed'),
  test_elicitation_sep1330_enums: (_args, ctx) =>
    elicit(ctx, 'Please select options from the enum fields', ELICIT_ENUMS, 'Elicitation completed'),
  test_reconnection: async (_args, ctx) => {
    // SEP-1699: the stream is closed mid-call; the answer is replayed to the client's reconnection.
    await sleep(50);
    ctx.http?.closeSSE?.();
    await sleep(200);
    return text('Reconnection test completed successfully');
  },
  json_schema_2020_12_tool: (args) => text(`Received: ${JSON.stringify(args)}`),
};

const RESOURCES = [
  { uri: 'test://static-text', name: 'static-text', description: 'A static text resource', mimeType: 'text/plain' },
  { uri: 'test://static-binary', name: 'static-binary', description: 'A static image', mimeType: 'image/png' },
  {
    uri: 'test://watched-resource',
    name: 'watched-resource',
    description: 'A resource to watch',
    mimeType: 'text/plain',
  },
];

function readResource(uri: string): ReadResourceResult {
  if (uri === 'test://static-text')
    return { contents: [{ uri, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }] };
  if (uri === 'test://static-binary') return { contents: [{ uri, mimeType: 'image/png', blob: PNG }] };
  if (uri === 'test://watched-resource') return { contents: [{ uri, mimeType: 'text/plain', text: 'Watched.' }] };
  const m = /^test:\/\/template\/([^/]+)\/data$/.exec(uri);
  if (m)
    return {
      contents: [
        {
          uri,
          mimeType: 'application/json',
          text: JSON.stringify({ id: m[1], templateTest: true, data: `Data for ID: ${m[1]}` }),
        },
      ],
    };
  throw new Error(`Resource not found: ${uri}`);
}

const PROMPTS = [
  { name: 'test_simple_prompt', description: 'A simple prompt' },
  {
    name: 'test_prompt_with_arguments',
    description: 'A prompt with arguments',
    arguments: [
      { name: 'arg1', description: 'First test argument', required: true },
      { name: 'arg2', description: 'Second test argument', required: true },
    ],
  },
  {
    name: 'test_prompt_with_embedded_resource',
    description: 'A prompt with an embedded resource',
    arguments: [{ name: 'resourceUri', description: 'URI of the resource to embed', required: true }],
  },
  { name: 'test_prompt_with_image', description: 'A prompt with an image' },
];

function getPrompt(name: string, args: Record<string, string>): GetPromptResult {
  const user = (content: GetPromptResult['messages'][number]['content']) => ({ role: 'user' as const, content });
  switch (name) {
    case 'test_simple_prompt':
      return { messages: [user({ type: 'text', text: 'This is a simple prompt for testing.' })] };
    case 'test_prompt_with_arguments':
      return {
        messages: [user({ type: 'text', text: `Prompt with arguments: arg1='${args.arg1}', arg2='${args.arg2}'` })],
      };
    case 'test_prompt_with_embedded_resource':
      return {
        messages: [
          user({
            type: 'resource',
            resource: {
              uri: args.resourceUri ?? '',
              mimeType: 'text/plain',
              text: 'Embedded resource content for testing.',
            },
          }),
          user({ type: 'text', text: 'Please process the embedded resource above.' }),
        ],
      };
    case 'test_prompt_with_image':
      return {
        messages: [
          user({ type: 'image', data: PNG, mimeType: 'image/png' }),
          user({ type: 'text', text: 'Please analyze the image above.' }),
        ],
      };
    default:
      throw new Error(`Prompt not found: ${name}`);
  }
}

/** Events kept for replay (Last-Event-ID), every stream's, in order. */
function memoryEventStore(): EventStore {
  const events: Array<{ id: string; stream: string; message: JSONRPCMessage }> = [];
  return {
    async storeEvent(stream, message) {
      const id = `${stream}_${events.length}`;
      events.push({ id, stream, message });
      return id;
    },
    async getStreamIdForEventId(id) {
      return events.find((e) => e.id === id)?.stream;
    },
    async replayEventsAfter(lastEventId, { send }) {
      const at = events.findIndex((e) => e.id === lastEventId);
      const stream = events[at]?.stream ?? '';
      for (const e of events.slice(at + 1)) if (e.stream === stream) await send(e.id, e.message);
      return stream;
    },
  };
}

function newServer(): Server {
  const server = new Server(
    { name: 'conformance-reference', version: '0.1.16' },
    {
      capabilities: {
        tools: { listChanged: true },
        resources: { subscribe: true, listChanged: true },
        prompts: { listChanged: true },
        logging: {},
        completions: {},
      },
    },
  );
  const subscriptions = new Set<string>();
  server.setRequestHandler('tools/list', () => ({ tools: TOOLS }));
  server.setRequestHandler('tools/call', async (request, ctx) => {
    const call = CALLS[request.params.name];
    if (!call) throw new Error(`Unknown tool: ${request.params.name}`);
    return call((request.params.arguments ?? {}) as Json, ctx);
  });
  server.setRequestHandler('resources/list', () => ({ resources: RESOURCES }));
  server.setRequestHandler('resources/templates/list', () => ({
    resourceTemplates: [
      {
        uriTemplate: 'test://template/{id}/data',
        name: 'template',
        description: 'Data by id',
        mimeType: 'application/json',
      },
    ],
  }));
  server.setRequestHandler('resources/read', (request) => readResource(request.params.uri));
  server.setRequestHandler('resources/subscribe', (request) => {
    subscriptions.add(request.params.uri);
    return {};
  });
  server.setRequestHandler('resources/unsubscribe', (request) => {
    subscriptions.delete(request.params.uri);
    return {};
  });
  server.setRequestHandler('prompts/list', () => ({ prompts: PROMPTS }));
  server.setRequestHandler('prompts/get', (request) =>
    getPrompt(request.params.name, (request.params.arguments ?? {}) as Record<string, string>),
  );
  server.setRequestHandler('completion/complete', () => ({ completion: { values: [], total: 0, hasMore: false } }));
  return server;
}

const LOCAL = new Set(['localhost', '127.0.0.1', '[::1]']);
const hostOf = (h: string) => (h.startsWith('[') ? h.slice(0, h.indexOf(']') + 1) : (h.split(':')[0] ?? ''));

export interface ConformanceServer {
  url: string;
  stop(): Promise<void>;
}

/** The reference server on a free loopback port; a session per initialize. */
export async function startConformanceServer(): Promise<ConformanceServer> {
  const sessions = new Map<string, WebStandardStreamableHTTPServerTransport>();
  const handle = async (req: Request): Promise<Response> => {
    // DNS rebinding protection, as the suite asks of a server on localhost.
    const origin = req.headers.get('origin');
    const host = hostOf(req.headers.get('host') ?? '');
    if (!LOCAL.has(host) || (origin !== null && !LOCAL.has(hostOf(new URL(origin).host))))
      return Response.json(
        { jsonrpc: '2.0', id: null, error: { code: -32000, message: 'Forbidden: invalid Host or Origin' } },
        { status: 403 },
      );
    const id = req.headers.get('mcp-session-id');
    const found = id ? sessions.get(id) : undefined;
    if (found) return found.handleRequest(req);
    if (id) return new Response('no such session', { status: 404 });
    const transport: WebStandardStreamableHTTPServerTransport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      eventStore: memoryEventStore(),
      retryInterval: 100,
      onsessioninitialized: (sid) => {
        sessions.set(sid, transport);
      },
    });
    await newServer().connect(transport);
    return transport.handleRequest(req);
  };
  const http = await new Promise<ReturnType<typeof serve>>((resolve) => {
    const s = serve({ fetch: handle, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
  });
  const port = (http.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    stop: async () => {
      await Promise.all([...sessions.values()].map((t) => t.close().catch(() => {})));
      await new Promise<void>((resolve) => {
        http.close(() => resolve());
        if ('closeAllConnections' in http) http.closeAllConnections();
      });
    },
  };
}
