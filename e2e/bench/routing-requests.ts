/**
 * How a labelled request of the routing bench (e2e/bench/routing-set.ts) becomes a request body
 * in the dialect it is sent in: OpenAI chat completions, OpenAI responses or Anthropic messages,
 * with its conversation, tool calls and their results, tools offered, an image, JSON output or a
 * reasoning effort written as each API writes them. Also the generators of the long documents
 * (transcripts, logs, contracts, code) the long-context requests carry: deterministic, so every
 * run sends the same bytes.
 */

export type BenchDialect = 'openai-chat' | 'openai-responses' | 'anthropic-messages';

export interface Tool {
  name: string;
  description: string;
  /** JSON schema of the arguments. */
  parameters: Record<string, unknown>;
}

/** A tool the assistant called and what it answered. */
export interface ToolStep {
  tool: string;
  args: Record<string, unknown>;
  result: string;
}

export type Turn = { role: 'user' | 'assistant'; text: string } | { role: 'assistant'; calls: ToolStep[] };

export interface Ask {
  system?: string;
  /** The conversation; the last user turn is the prompt. */
  turns: Turn[];
  tools?: Tool[];
  /** A PNG attached to the last user turn. */
  image?: boolean;
  /** JSON output asked: any object, or one of this schema. */
  json?: true | Record<string, unknown>;
  reasoning?: 'low' | 'medium' | 'high';
}

/** A 1x1 PNG: what matters to the router is that an image is there, not what it shows. */
const PNG_BASE64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
const PNG_URL = `data:image/png;base64,${PNG_BASE64}`;
/** Anthropic asks for a thinking budget where the others ask for an effort. */
const THINKING_BUDGET = { low: 2048, medium: 8192, high: 16_384 } as const;

const callId = (turn: number, i: number) => `call_${turn}_${i}`;

function chatBody(a: Ask): Record<string, unknown> {
  const messages: Array<Record<string, unknown>> = a.system ? [{ role: 'system', content: a.system }] : [];
  for (const [t, turn] of a.turns.entries()) {
    if ('calls' in turn) {
      messages.push({
        role: 'assistant',
        content: null,
        tool_calls: turn.calls.map((c, i) => ({
          id: callId(t, i),
          type: 'function',
          function: { name: c.tool, arguments: JSON.stringify(c.args) },
        })),
      });
      for (const [i, c] of turn.calls.entries())
        messages.push({ role: 'tool', tool_call_id: callId(t, i), content: c.result });
    } else messages.push({ role: turn.role, content: turn.text });
  }
  const last = messages.at(-1);
  if (a.image && last)
    last.content = [
      { type: 'text', text: last.content },
      { type: 'image_url', image_url: { url: PNG_URL } },
    ];
  const body: Record<string, unknown> = { model: 'auto', messages };
  if (a.tools)
    body.tools = a.tools.map((t) => ({
      type: 'function',
      function: { name: t.name, description: t.description, parameters: t.parameters },
    }));
  if (a.json)
    body.response_format =
      a.json === true
        ? { type: 'json_object' }
        : { type: 'json_schema', json_schema: { name: 'answer', schema: a.json } };
  if (a.reasoning) body.reasoning_effort = a.reasoning;
  return body;
}

function responsesBody(a: Ask): Record<string, unknown> {
  const input: Array<Record<string, unknown>> = [];
  for (const [t, turn] of a.turns.entries()) {
    if ('calls' in turn) {
      for (const [i, c] of turn.calls.entries())
        input.push({ type: 'function_call', call_id: callId(t, i), name: c.tool, arguments: JSON.stringify(c.args) });
      for (const [i, c] of turn.calls.entries())
        input.push({ type: 'function_call_output', call_id: callId(t, i), output: c.result });
    } else if (turn.role === 'user') input.push({ role: 'user', content: turn.text });
    else
      input.push({
        type: 'message',
        role: 'assistant',
        content: [{ type: 'output_text', text: turn.text, annotations: [] }],
      });
  }
  const last = input.at(-1);
  if (a.image && last)
    last.content = [
      { type: 'input_text', text: last.content },
      { type: 'input_image', image_url: PNG_URL },
    ];
  const single = input.length === 1 && !a.image ? (input[0]?.content as string) : undefined;
  const body: Record<string, unknown> = { model: 'auto', input: single ?? input };
  if (a.system) body.instructions = a.system;
  if (a.tools)
    body.tools = a.tools.map((t) => ({
      type: 'function',
      name: t.name,
      description: t.description,
      parameters: t.parameters,
    }));
  if (a.json)
    body.text = {
      format: a.json === true ? { type: 'json_object' } : { type: 'json_schema', name: 'answer', schema: a.json },
    };
  if (a.reasoning) body.reasoning = { effort: a.reasoning };
  return body;
}

function messagesBody(a: Ask): Record<string, unknown> {
  const messages: Array<{ role: string; content: unknown }> = [];
  for (const [t, turn] of a.turns.entries()) {
    if ('calls' in turn) {
      messages.push({
        role: 'assistant',
        content: turn.calls.map((c, i) => ({ type: 'tool_use', id: callId(t, i), name: c.tool, input: c.args })),
      });
      messages.push({
        role: 'user',
        content: turn.calls.map((c, i) => ({ type: 'tool_result', tool_use_id: callId(t, i), content: c.result })),
      });
    } else messages.push({ role: turn.role, content: turn.text });
  }
  const last = messages.at(-1);
  if (a.image && last)
    last.content = [
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG_BASE64 } },
      { type: 'text', text: last.content },
    ];
  const body: Record<string, unknown> = { model: 'auto', max_tokens: 1024, messages };
  if (a.system) body.system = a.system;
  if (a.tools)
    body.tools = a.tools.map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters }));
  if (a.json && a.json !== true) body.output_format = { type: 'json_schema', schema: a.json };
  if (a.reasoning) body.thinking = { type: 'enabled', budget_tokens: THINKING_BUDGET[a.reasoning] };
  return body;
}

/** The request `a` as `dialect` writes it; `model` is "auto" until the bench names the policy. */
export function bodyOf(dialect: BenchDialect, a: Ask): Record<string, unknown> {
  if (dialect === 'openai-responses') return responsesBody(a);
  if (dialect === 'anthropic-messages') return messagesBody(a);
  return chatBody(a);
}

// ---- tools the agent-style requests offer ----

const obj = (props: Record<string, string>, required = Object.keys(props)) => ({
  type: 'object',
  properties: Object.fromEntries(Object.entries(props).map(([k, type]) => [k, { type }])),
  required,
});

export const TOOLS = {
  weather: { name: 'get_weather', description: 'Current weather for a city', parameters: obj({ city: 'string' }) },
  calendar: {
    name: 'create_event',
    description: 'Create a calendar event',
    parameters: obj({ title: 'string', start: 'string', minutes: 'integer' }),
  },
  currency: {
    name: 'convert_currency',
    description: 'Convert an amount between currencies at the current rate',
    parameters: obj({ amount: 'number', from: 'string', to: 'string' }),
  },
  order: { name: 'get_order', description: 'Look up an order by id', parameters: obj({ order_id: 'string' }) },
  refund: {
    name: 'issue_refund',
    description: 'Refund an order, fully or partly',
    parameters: obj({ order_id: 'string', amount: 'number', reason: 'string' }),
  },
  sql: {
    name: 'run_sql',
    description: 'Run a read-only SQL query on the analytics database',
    parameters: obj({ query: 'string' }),
  },
  flights: {
    name: 'search_flights',
    description: 'Search flights',
    parameters: obj({ from: 'string', to: 'string', date: 'string' }),
  },
  book: { name: 'book_flight', description: 'Book a flight by offer id', parameters: obj({ offer_id: 'string' }) },
  read: { name: 'read_file', description: 'Read a file of the repository', parameters: obj({ path: 'string' }) },
  edit: {
    name: 'edit_file',
    description: 'Replace one exact string in a file with another',
    parameters: obj({ path: 'string', old_string: 'string', new_string: 'string' }),
  },
  write: {
    name: 'write_file',
    description: 'Write a whole file',
    parameters: obj({ path: 'string', content: 'string' }),
  },
  shell: {
    name: 'run_command',
    description: 'Run a shell command in the repository root',
    parameters: obj({ command: 'string' }),
  },
  grep: {
    name: 'search_code',
    description: 'Search the repository for a regular expression',
    parameters: obj({ pattern: 'string', glob: 'string' }, ['pattern']),
  },
  list: { name: 'list_dir', description: 'List a directory', parameters: obj({ path: 'string' }) },
} satisfies Record<string, Tool>;

/** What a coding agent offers: its file, shell and search tools. */
export const CODING_TOOLS: Tool[] = [TOOLS.read, TOOLS.edit, TOOLS.write, TOOLS.shell, TOOLS.grep, TOOLS.list];

export const CODING_SYSTEM =
  "You are a coding agent working in the user's repository. Use the tools to read, search and edit files and to run commands. Keep changes minimal, run the tests before you finish, and explain what you changed.";

// ---- long documents, generated deterministically ----

/** A small deterministic generator (mulberry32), so the documents are the same every run. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const pick = <T>(r: () => number, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)] as T;

const SPEAKERS = ['Priya', 'Marcus', 'Elena', 'Tom', 'Aisha', 'Jonas'];
const TOPICS = [
  'the Q3 launch',
  'the onboarding flow',
  'the pricing page',
  'vendor contracts',
  'the data migration',
  'hiring',
];
const OPINIONS = [
  'I think we should move the date by two weeks because QA is not done with',
  'The customer feedback on',
  'Legal asked us to review the wording around',
  'We are over budget by about eight percent on',
  'Support tickets went up after the last change to',
  'I can take the action item to write up a proposal for',
  'Can we agree to freeze scope on',
  'Design has new mockups for',
];
const CLOSERS = [
  'and I would like a decision today.',
  'so let us revisit it next week.',
  'which is mostly positive, with a few complaints about speed.',
  'but nobody has owned it yet.',
  'and finance needs the numbers by Friday.',
  'which I will share in the channel after the call.',
];

/** A meeting transcript of `lines` remarks. */
export function transcript(lines: number, seed: number): string {
  const r = random(seed);
  const out: string[] = [];
  for (let i = 0; i < lines; i++) {
    const minute = String(Math.floor(i / 3)).padStart(2, '0');
    out.push(`[00:${minute}] ${pick(r, SPEAKERS)}: ${pick(r, OPINIONS)} ${pick(r, TOPICS)} ${pick(r, CLOSERS)}`);
  }
  return out.join('\n');
}

const SERVICES = ['api-gateway', 'orders', 'payments', 'inventory', 'auth', 'notifications'];
const PATHS = ['/v1/orders', '/v1/orders/{id}', '/v1/payments', '/v1/cart', '/v1/login', '/v1/stock/{sku}'];

/** Service logs of `lines` lines; about 4 % errors, with the timeouts of one dependency clustered late. */
export function serviceLogs(lines: number, seed: number): string {
  const r = random(seed);
  const out: string[] = [];
  for (let i = 0; i < lines; i++) {
    const t = new Date(Date.UTC(2025, 2, 14, 9, 0, 0) + i * 731).toISOString();
    const service = pick(r, SERVICES);
    const trace = Math.floor(r() * 0xffffffff).toString(16);
    if (r() < 0.04 || (i > lines * 0.7 && service === 'payments' && r() < 0.3)) {
      const err = pick(r, [
        'upstream timeout after 3000ms (ledger-db)',
        'connection reset by peer',
        'deadline exceeded calling inventory',
        'HTTP 503 from fraud-check',
      ]);
      out.push(`${t} ERROR ${service} trace=${trace} path=${pick(r, PATHS)} msg="${err}"`);
    } else {
      const ms = Math.floor(5 + r() * (service === 'payments' ? 400 : 80));
      out.push(`${t} INFO  ${service} trace=${trace} path=${pick(r, PATHS)} status=200 duration_ms=${ms}`);
    }
  }
  return out.join('\n');
}

const CLAUSES = [
  'The Supplier shall deliver the Services in accordance with the Service Levels set out in Schedule 2, and any failure to meet a Service Level for two consecutive months entitles the Customer to the service credits described therein.',
  'Either party may terminate this Agreement for convenience on ninety (90) days written notice, provided that no termination for convenience shall take effect before the first anniversary of the Effective Date.',
  'The Customer shall pay each undisputed invoice within thirty (30) days of receipt. Late payments bear interest at one percent (1%) per month or the maximum rate permitted by law, whichever is lower.',
  "Each party shall keep the other party's Confidential Information secret and shall not disclose it except to its employees and advisers who need to know it for the purposes of this Agreement.",
  "The Supplier's total liability under this Agreement shall not exceed the fees paid in the twelve (12) months preceding the event giving rise to the claim, except for breaches of confidentiality or data protection obligations.",
  'Either party may terminate this Agreement immediately by written notice if the other party commits a material breach which is irremediable or, if remediable, is not remedied within thirty (30) days of notice.',
  'The Supplier shall process Personal Data only on documented instructions from the Customer and shall notify the Customer without undue delay, and in any event within forty-eight (48) hours, of any Personal Data Breach.',
  'Neither party shall be liable for any delay or failure to perform caused by events beyond its reasonable control, provided that it notifies the other party promptly and uses reasonable efforts to mitigate the effects.',
];

/** A services agreement of `sections` numbered clauses. */
export function contract(sections: number, seed: number): string {
  const r = random(seed);
  const out = [
    'MASTER SERVICES AGREEMENT',
    'between Northwind Analytics Ltd ("Supplier") and Contoso Retail plc ("Customer")',
  ];
  for (let i = 1; i <= sections; i++) out.push(`${i}. ${pick(r, CLAUSES)}`);
  return out.join('\n\n');
}

const SENTENCES = [
  'Remote work has changed how teams communicate, with written updates replacing many meetings.',
  'Several studies report higher satisfaction among employees who can choose where they work.',
  'Managers worry that junior staff learn more slowly without being able to watch experienced colleagues.',
  'Companies have reduced office space, although many keep a smaller hub for collaboration days.',
  'Commuting time saved is often reinvested in work, which some researchers link to burnout.',
  'Tools for asynchronous collaboration have improved, but time zones still make coordination hard.',
  'Some firms now pay differently by location, a policy that remains controversial.',
  'Cities have seen lunchtime businesses near offices struggle while suburbs gain foot traffic.',
];

/** An article of `paragraphs` paragraphs of five sentences. */
export function article(paragraphs: number, seed: number): string {
  const r = random(seed);
  const out: string[] = [];
  for (let p = 0; p < paragraphs; p++) out.push(Array.from({ length: 5 }, () => pick(r, SENTENCES)).join(' '));
  return out.join('\n\n');
}

/** Customer reviews, one a line. */
export function reviews(count: number, seed: number): string {
  const r = random(seed);
  const good = [
    'Great sound quality',
    'Comfortable for hours',
    'Pairs instantly with my phone',
    'Battery lasts all week',
  ];
  const bad = [
    'The left earbud disconnects randomly',
    'Case hinge broke after a month',
    'Microphone sounds muffled on calls',
    'App keeps asking me to log in',
    'Charging takes forever',
  ];
  const out: string[] = [];
  for (let i = 0; i < count; i++) {
    const stars = 1 + Math.floor(r() * 5);
    const text =
      stars >= 4
        ? `${pick(r, good)}. ${pick(r, good)}.`
        : `${pick(r, bad)}. ${stars === 3 ? pick(r, good) : pick(r, bad)}.`;
    out.push(`Review #${i + 1} (${stars}/5): ${text}`);
  }
  return out.join('\n');
}

/** TypeScript modules of a small service: a cache, a repository and handlers, `files` of them. */
export function codebase(files: number, seed: number): string {
  const r = random(seed);
  const entities = ['user', 'order', 'product', 'invoice', 'session', 'coupon', 'address', 'review'];
  const out: string[] = [];
  for (let i = 0; i < files; i++) {
    const e = pick(r, entities);
    const E = e[0]?.toUpperCase() + e.slice(1);
    out.push(`// src/${e}s/${e}-service-${i}.ts
import { cache } from '../cache.js';
import { db } from '../db.js';

export interface ${E}${i} { id: string; version: number; updatedAt: number; data: Record<string, unknown> }

export async function get${E}${i}(id: string): Promise<${E}${i} | undefined> {
  const hit = cache.get(\`${e}:\${id}\`);
  if (hit) return hit as ${E}${i};
  const row = await db.query('SELECT * FROM ${e}s WHERE id = $1', [id]);
  if (row) cache.set(\`${e}:\${id}\`, row, { ttlMs: ${1000 * (5 + Math.floor(r() * 60))} });
  return row as ${E}${i} | undefined;
}

export async function update${E}${i}(id: string, patch: Record<string, unknown>): Promise<void> {
  const current = await get${E}${i}(id);
  if (!current) throw new Error('${e} not found');
  await db.query('UPDATE ${e}s SET data = $2, version = version + 1 WHERE id = $1', [id, { ...current.data, ...patch }]);
  ${r() < 0.5 ? `cache.delete(\`${e}:\${id}\`);` : '// the cache entry expires on its own'}
}
`);
  }
  return out.join('\n');
}
