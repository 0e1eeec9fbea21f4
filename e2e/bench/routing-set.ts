import {
  type Ask,
  article,
  type BenchDialect,
  bodyOf,
  CODING_SYSTEM,
  CODING_TOOLS,
  codebase,
  contract,
  reviews,
  serviceLogs,
  TOOLS,
  type ToolStep,
  transcript,
} from './routing-requests.js';

/**
 * The routing bench's labelled requests (e2e/bench/routing.ts): 199 requests, each labelled with
 * the cheapest tier that answers it acceptably. Written for this repository, not copied from a
 * benchmark. Light: what a 1-8B open-weight model does well (recall, rewriting, translation,
 * simple extraction and code, one tool call). Standard: what needs a small hosted model of the
 * GPT-4o-mini / Claude Haiku class (ordinary programming and debugging, multi-step word problems,
 * long documents, complex schemas, agent loops of a few steps, images). Frontier: proofs, deep
 * system design, concurrency and distributed debugging, long multi-step coding, olympiad math.
 * About 50 / 30 / 20 %. The dialect cycles chat, chat, chat, responses, messages over the list, so
 * each kind of request is seen in all three shapes. Long documents are 4k-12k tokens: longer, one
 * request would outweigh the rest of the set in the cost totals, and its routing alone would
 * decide the savings.
 *
 * The set is split in two halves by position (even and odd), `tuning` and `heldOut`: scorer
 * changes made after seeing results are judged on the half they were not made on.
 */

export type Label = 'light' | 'standard' | 'frontier';

export interface LabelledRequest {
  id: string;
  tier: Label;
  kind: string;
  dialect: BenchDialect;
  half: 'tuning' | 'heldOut';
  body: Record<string, unknown>;
}

type Entry = [Label, string, string | Ask];

const user = (text: string): Ask => ({ turns: [{ role: 'user', text }] });
const withJson = (text: string, json: true | Record<string, unknown> = true): Ask => ({ ...user(text), json });
const withImage = (text: string): Ask => ({ ...user(text), image: true });
const reasoning = (effort: 'low' | 'medium' | 'high', text: string): Ask => ({ ...user(text), reasoning: effort });

/** A conversation of alternating user and assistant texts, the last one the user's. */
const chatTurns = (...texts: string[]): Ask => ({
  turns: texts.map((text, i) => ({ role: i % 2 === 0 ? 'user' : 'assistant', text })),
});

/** An agent's loop: the task, then each step's calls and results, then the user's follow-up if any. */
function agent(
  task: string,
  steps: ToolStep[][],
  opts: { followUp?: string; system?: string; tools?: Ask['tools'] },
): Ask {
  return {
    system: opts.system ?? CODING_SYSTEM,
    tools: opts.tools ?? CODING_TOOLS,
    turns: [
      { role: 'user', text: task },
      ...steps.map((calls) => ({ role: 'assistant' as const, calls })),
      ...(opts.followUp ? [{ role: 'user' as const, text: opts.followUp }] : []),
    ],
  };
}

const schema = (props: Record<string, unknown>) => ({
  type: 'object',
  properties: props,
  required: Object.keys(props),
  additionalProperties: false,
});

// ---------------------------------------------------------------- light
const LIGHT: Entry[] = [
  ['light', 'chat', 'What is the capital of Australia?'],
  ['light', 'chat', 'Who wrote "Pride and Prejudice"?'],
  ['light', 'chat', 'How many legs does a spider have?'],
  ['light', 'chat', "What's the boiling point of water in Fahrenheit?"],
  ['light', 'chat', 'When did the Berlin Wall fall?'],
  ['light', 'chat', 'What does HTTP stand for?'],
  ['light', 'chat', 'Is a tomato a fruit or a vegetable?'],
  ['light', 'chat', 'What is the largest planet in our solar system?'],
  ['light', 'chat', 'Give me three synonyms for "happy".'],
  ['light', 'chat', 'What is the plural of "cactus"?'],
  ['light', 'chat', 'Which ocean is the largest?'],
  ['light', 'chat', 'What language do people speak in Brazil?'],
  ['light', 'chat', 'What does NASA stand for?'],
  ['light', 'chat', 'What year did the first iPhone come out?'],
  ['light', 'chat', 'Name the three primary colors.'],
  ['light', 'chat', 'What\'s the difference between "affect" and "effect"?'],
  ['light', 'chat', 'Explain photosynthesis in one sentence.'],
  ['light', 'chat', 'How many minutes are in a day?'],
  ['light', 'chat', "What's a good name for a golden retriever puppy?"],
  ['light', 'chat', 'What time zone is Tokyo in?'],
  ['light', 'chat', chatTurns('What is the capital of France?', 'The capital of France is Paris.', 'And of Germany?')],
  [
    'light',
    'chat',
    chatTurns(
      'Can you recommend a movie for tonight?',
      'Sure! Do you prefer comedy, drama or something else?',
      'Comedy, something light.',
      'Try "Paddington 2": warm, funny and good for all ages.',
      'Nice, anything similar?',
    ),
  ],
  [
    'light',
    'chat',
    chatTurns('hi!', 'Hello! How can I help you today?', 'just wanted to say thanks for the help yesterday'),
  ],
  // rewriting
  ['light', 'rewrite', 'Fix the grammar: "Me and him goes to the store yesterday and buyed some apple."'],
  ['light', 'rewrite', 'Rewrite this more politely: "Send me the report now, you\'re late again."'],
  [
    'light',
    'rewrite',
    'Make this sentence shorter: "Due to the fact that we are experiencing a high volume of calls at this point in time, your wait may be longer than usual."',
  ],
  [
    'light',
    'rewrite',
    'Rephrase this in a casual, friendly tone: "We regret to inform you that your application has not been successful."',
  ],
  ['light', 'rewrite', 'Turn this into a bullet list: "We need milk, eggs, two loaves of bread, and some coffee."'],
  ['light', 'rewrite', 'Proofread: "Their going to the libary tomorow to study for there exam."'],
  ['light', 'rewrite', 'Rewrite this tweet so it sounds more excited: "Our new app version is out today."'],
  ['light', 'rewrite', 'Change to passive voice: "The committee approved the new budget."'],
  ['light', 'rewrite', 'Write this in formal English: "hey can u let me know if the meeting is still on for tmrw"'],
  ['light', 'rewrite', 'Capitalize this title properly: "the lord of the rings: the return of the king"'],
  // short summaries
  [
    'light',
    'summarize',
    'Summarize this email in one sentence: "Hi team, the office will be closed on Monday for the public holiday. Please make sure to submit your timesheets by Friday at 5pm so payroll can process them on time. Thanks, Maria"',
  ],
  [
    'light',
    'summarize',
    "TL;DR: Coffee was first cultivated in Yemen in the 15th century, where Sufi monks drank it to stay awake during night prayers. From there it spread to Mecca, Cairo and Istanbul, where the first coffee houses opened. By the 17th century coffee had reached Europe, and coffee houses in London became places where merchants met, which is how Lloyd's of London began.",
  ],
  [
    'light',
    'summarize',
    'Summarize in two sentences: The city council voted on Tuesday to build a protected bike lane along Main Street, replacing one lane of car traffic between 3rd and 12th Avenue. Supporters said the change will make cycling safer for the thousands of students who commute to the university. Some shop owners worried about losing parking spaces, and the council agreed to add a loading zone on each block. Construction starts in April and should finish before the end of summer.',
  ],
  [
    'light',
    'summarize',
    'What is the main point of this review? "I wanted to love this blender. It looks great and is quiet, but it could not crush ice at all, and after two weeks the lid started leaking. Returned it."',
  ],
  [
    'light',
    'summarize',
    'Summarize this Slack thread:\nAna: deploy is blocked, staging db is down\nBen: looking, disk is full\nBen: cleared old snapshots, db is back\nAna: thanks! deploying now',
  ],
  [
    'light',
    'summarize',
    "What's the main idea of this paragraph? Sleep plays a key role in memory. During deep sleep the brain replays what was learned during the day and strengthens the connections between neurons, which is why students who sleep after studying remember more than those who stay up all night.",
  ],
  [
    'light',
    'summarize',
    'Summarize this product description for a listing title: "Stainless steel insulated water bottle, 750 ml, keeps drinks cold for 24 hours and hot for 12, leak-proof lid, fits standard cup holders, dishwasher safe, available in six colors."',
  ],
  [
    'light',
    'summarize',
    'Write a one-line summary of this commit message: "Previously the retry loop in the uploader did not reset its backoff after a successful chunk, so long uploads slowed down over time. Reset the backoff after each success and add a test."',
  ],
  // translation
  ['light', 'translate', 'Translate "Where is the train station?" into French.'],
  ['light', 'translate', 'Translate to Spanish: "The meeting has been moved to Thursday afternoon."'],
  ['light', 'translate', 'How do you say "thank you very much" in Japanese?'],
  [
    'light',
    'translate',
    'Translate this German sentence into English: "Ich habe heute keine Zeit, aber morgen gerne."',
  ],
  ['light', 'translate', 'Translate to Italian: "Could you recommend a good restaurant nearby?"'],
  ['light', 'translate', 'Translate into Portuguese: "Please keep your receipt for returns."'],
  ['light', 'translate', 'What does "carpe diem" mean?'],
  ['light', 'translate', 'Translate "I\'m allergic to peanuts" into Simplified Chinese.'],
  ['light', 'translate', 'Translate to English: "Je voudrais réserver une table pour deux personnes ce soir."'],
  [
    'light',
    'translate',
    'Translate this product label into Spanish: "Keep refrigerated. Consume within 3 days of opening."',
  ],
  // classification and extraction, JSON asked
  [
    'light',
    'extract',
    withJson(
      'Classify the sentiment of this review as positive, negative or neutral. Answer as JSON {"sentiment": ...}. Review: "Arrived on time and works exactly as described. Very happy."',
    ),
  ],
  [
    'light',
    'extract',
    withJson(
      'Extract the name, email and phone number from this signature as JSON:\n--\nDana Whitfield\nSenior Buyer, Greenleaf Foods\ndana.whitfield@greenleaf.example | +1 415 555 0142',
    ),
  ],
  [
    'light',
    'extract',
    withJson(
      'Is this email spam? Reply with JSON {"spam": true|false}. Email: "Congratulations! You\'ve won a $1000 gift card. Click here within 24 hours to claim your prize."',
    ),
  ],
  [
    'light',
    'extract',
    withJson(
      'Extract the date, time and room of the meeting as JSON with keys date, time, room: "Let\'s meet next Tuesday, March 4th, at 3:30pm in room 204."',
    ),
  ],
  [
    'light',
    'extract',
    withJson(
      'Categorize this support ticket as one of billing, technical, account, other, as JSON {"category": ...}: "I was charged twice for my subscription this month."',
    ),
  ],
  [
    'light',
    'extract',
    withJson(
      'Detect the language of each sentence and answer with a JSON array of ISO codes: ["Hola, ¿cómo estás?", "Guten Morgen", "Good evening"]',
    ),
  ],
  [
    'light',
    'extract',
    withJson(
      'List the products and their prices as JSON [{"name", "price"}]: "We sell the Alpha Mouse for $19.99, the Beta Keyboard for $49 and the Gamma Headset for $89.50."',
    ),
  ],
  [
    'light',
    'extract',
    withJson(
      'Tag this headline with one topic (politics, sports, tech, business, entertainment), as JSON {"topic": ...}: "Apple unveils new chip at developer conference"',
    ),
  ],
  [
    'light',
    'extract',
    withJson(
      'Split this address into JSON fields street, city, postal_code, country: "221B Baker Street, London NW1 6XE, United Kingdom"',
      schema({
        street: { type: 'string' },
        city: { type: 'string' },
        postal_code: { type: 'string' },
        country: { type: 'string' },
      }),
    ),
  ],
  [
    'light',
    'extract',
    withJson(
      'Is this message toxic? JSON {"toxic": boolean, "reason": string}. Message: "You\'re an idiot and nobody likes you."',
    ),
  ],
  // simple code
  ['light', 'code', 'Write a Python function that checks whether a number is even.'],
  ['light', 'code', 'How do I reverse an array in JavaScript?'],
  ['light', 'code', "What's the git command to create a new branch and switch to it?"],
  ['light', 'code', 'Write a SQL query that selects all users older than 30 from a table called users.'],
  ['light', 'code', 'How do I list all files in a directory, hidden ones included, on Linux?'],
  ['light', 'code', 'Write a regex that matches a 5-digit US ZIP code.'],
  ['light', 'code', 'Convert this Python 2 line to Python 3: print "hello", name'],
  ['light', 'code', 'In CSS, how do I center text horizontally?'],
  ['light', 'code', 'Give me a bash one-liner that counts the lines of all .txt files in the current directory.'],
  ['light', 'code', 'What does `git stash` do?'],
  ['light', 'code', 'How do I read a JSON file in Node.js?'],
  ['light', 'code', 'Write a Go function that returns the larger of two ints.'],
  // arithmetic and conversions
  ['light', 'math', 'What is 15% of 240?'],
  ['light', 'math', 'Convert 5 miles to kilometers.'],
  ['light', 'math', 'What is 144 divided by 12?'],
  ['light', 'math', 'Convert 100 degrees Fahrenheit to Celsius.'],
  ['light', 'math', 'I have 3 apples and buy 5 more. How many apples do I have?'],
  ['light', 'math', 'Round 3.14159 to two decimal places.'],
  ['light', 'math', 'How many seconds are in 3 hours?'],
  ['light', 'math', "What's 7 times 8?"],
  // short creative and everyday writing
  ['light', 'creative', 'Write a haiku about autumn leaves.'],
  ['light', 'creative', 'Tell me a joke about programmers.'],
  ['light', 'creative', 'Suggest five names for a small coffee shop.'],
  ['light', 'creative', 'Write a short birthday message for my coworker Sam.'],
  ['light', 'creative', 'Give me three ideas for a rainy weekend with kids.'],
  ['light', 'creative', 'Write a two-line rhyme about a cat who loves naps.'],
  ['light', 'creative', "Draft a short out-of-office reply: I'm away until June 10 and Lee covers urgent requests."],
  ['light', 'creative', 'Give me a motivational quote for Monday morning.'],
  ['light', 'creative', 'Suggest a title for a blog post about composting at home.'],
  ['light', 'creative', 'Write a thank-you note to a neighbor who watered my plants while I was away.'],
  ['light', 'creative', 'Recommend three classic science-fiction novels.'],
  // one tool call
  ['light', 'tools', { ...user("What's the weather in Paris right now?"), tools: [TOOLS.weather] }],
  [
    'light',
    'tools',
    { ...user('Add a meeting tomorrow at 10am called "standup", 15 minutes.'), tools: [TOOLS.calendar] },
  ],
  ['light', 'tools', { ...user('How much is 100 USD in euros today?'), tools: [TOOLS.currency] }],
  ['light', 'tools', { ...user('Where is my order 12345?'), tools: [TOOLS.order] }],
  [
    'light',
    'tools',
    agent(
      'Is it going to be cold in Oslo today?',
      [[{ tool: 'get_weather', args: { city: 'Oslo' }, result: '{"temp_c": -4, "conditions": "light snow"}' }]],
      { system: 'You are a helpful assistant.', tools: [TOOLS.weather] },
    ),
  ],
  // a simple look at an image
  ['light', 'image', withImage('What is the main color of this image?')],
  ['light', 'image', withImage('Describe this picture in one sentence.')],
];

// ---------------------------------------------------------------- standard
const STANDARD: Entry[] = [
  // ordinary programming
  ['standard', 'code', 'Write a Python class implementing an LRU cache with get and put in O(1) time.'],
  [
    'standard',
    'code',
    'Write a TypeScript function that parses one CSV line into fields. Fields may be quoted; quoted fields can contain commas and doubled quotes ("") as escapes.',
  ],
  [
    'standard',
    'code',
    'Explain what this code does and point out any bugs:\n```js\nfunction chunk(arr, size) {\n  const out = [];\n  for (let i = 0; i <= arr.length; i += size) {\n    out.push(arr.slice(i, i + size));\n  }\n  return out;\n}\n\nconsole.log(chunk([1, 2, 3, 4], 2));\n```',
  ],
  [
    'standard',
    'code',
    'Write pytest tests for this function, covering the edge cases:\n```python\ndef discount(price: float, percent: float) -> float:\n    if percent < 0 or percent > 100:\n        raise ValueError("percent out of range")\n    return round(price * (1 - percent / 100), 2)\n```',
  ],
  [
    'standard',
    'code',
    'Write a SQL query returning the top 3 customers by total order amount in each country. Tables: customers(id, name, country), orders(id, customer_id, amount, created_at). Only count orders from 2024.',
  ],
  [
    'standard',
    'code',
    'Convert this callback code to async/await:\n```js\nfs.readFile(path, "utf8", (err, text) => {\n  if (err) return done(err);\n  db.save(JSON.parse(text), (err2, id) => {\n    if (err2) return done(err2);\n    done(null, id);\n  });\n});\n```',
  ],
  [
    'standard',
    'code',
    'Write a React component for a searchable dropdown: it filters options as the user types and supports arrow keys and Enter.',
  ],
  [
    'standard',
    'code',
    'Write a Dockerfile for a Python Flask app served by gunicorn on port 8000, running as a non-root user, and explain each line.',
  ],
  [
    'standard',
    'code',
    'Write a bash script that backs up a directory into a timestamped .tar.gz in /backups and deletes backups older than 7 days.',
  ],
  ['standard', 'code', 'Implement binary search in Rust over a sorted slice of i32, returning Option<usize>.'],
  [
    'standard',
    'code',
    'Write a GitHub Actions workflow that runs `npm test` on Node 20 and 22 for every pull request, caching npm.',
  ],
  [
    'standard',
    'code',
    'Write a Kubernetes Deployment and Service for nginx with 3 replicas, resource requests, and a readiness probe on /healthz.',
  ],
  // common debugging
  [
    'standard',
    'debug',
    'My Flask app fails on some requests:\n```\nTraceback (most recent call last):\n  File "/app/app.py", line 41, in checkout\n    user_id = session["user_id"]\n  File "/usr/lib/python3.11/site-packages/flask/sessions.py", line 80, in __getitem__\n    return super().__getitem__(key)\nKeyError: \'user_id\'\n```\nWhat is wrong and how do I fix it?',
  ],
  [
    'standard',
    'debug',
    'React crashes with "TypeError: Cannot read properties of undefined (reading \'map\')" at UserList (UserList.jsx:12). The component does `const [users, setUsers] = useState(); useEffect(() => { fetch("/api/users").then(r => r.json()).then(setUsers) }, []); return <ul>{users.map(u => <li key={u.id}>{u.name}</li>)}</ul>`. Why, and what is the fix?',
  ],
  [
    'standard',
    'debug',
    'Exception in thread "main" java.lang.NullPointerException: Cannot invoke "String.length()" because "name" is null\n    at com.shop.Greeter.greet(Greeter.java:9)\n    at com.shop.Main.main(Main.java:5)\nGreeter.greet is `return "Hello " + name.trim() + " (" + name.length() + ")";` and Main passes `args.length > 0 ? args[0] : null`. Explain and fix.',
  ],
  [
    'standard',
    'debug',
    'panic: assignment to entry in nil map\n\ngoroutine 1 [running]:\nmain.(*Registry).Add(...)\n\t/src/registry.go:14\nmain.main()\n\t/src/main.go:9 +0x45\n\ntype Registry struct { items map[string]int }\nfunc (r *Registry) Add(k string) { r.items[k]++ }\nfunc main() { r := &Registry{}; r.Add("a") }\nHow do I fix it?',
  ],
  [
    'standard',
    'debug',
    'My Node service logs "Error: connect ECONNREFUSED 127.0.0.1:5432" at startup inside Docker Compose, but the database container is running. What is going on?',
  ],
  [
    'standard',
    'debug',
    'error[E0502]: cannot borrow `v` as mutable because it is also borrowed as immutable\n --> src/main.rs:4:5\n  |\n3 |     let first = &v[0];\n4 |     v.push(4);\n5 |     println!("{}", first);\nExplain the error and show two ways to fix it.',
  ],
  // multi-step word problems, calculus, statistics
  [
    'standard',
    'math',
    'Train A leaves city X at 60 km/h toward city Y, 300 km away. Train B leaves Y toward X at 90 km/h half an hour later. When and how far from X do they meet?',
  ],
  ['standard', 'math', 'Find the derivative of f(x) = x^3 ln(x) and its critical points for x > 0.'],
  [
    'standard',
    'math',
    'A bag holds 5 red and 3 blue marbles. I draw 2 without replacement. What is the probability that both are red? And at least one blue?',
  ],
  ['standard', 'math', 'Solve the system 2x + 3y = 12 and x - y = 1, and check the answer.'],
  [
    'standard',
    'math',
    'A recipe for 4 people needs 250 g flour, 3 eggs and 200 ml milk. Scale it for 10 people and give the flour in cups (1 cup = 125 g), rounding eggs sensibly.',
  ],
  ['standard', 'math', 'Compute the mean, median and sample standard deviation of 4, 8, 15, 16, 23, 42.'],
  [
    'standard',
    'math',
    'A $20,000 loan at 6% a year, compounded monthly, is repaid over 5 years. What is the monthly payment? Show the formula.',
  ],
  ['standard', 'math', 'Evaluate the integral of x e^x from 0 to 1, showing the integration by parts.'],
  // long documents
  [
    'standard',
    'long',
    `Here is the transcript of today's product meeting. List the decisions made and the action items with their owners.\n\n${transcript(260, 1)}`,
  ],
  [
    'standard',
    'long',
    `Which services logged errors in this window, how many each, and what were the most common error messages?\n\n${serviceLogs(420, 2)}`,
  ],
  ['standard', 'long', `Summarize this article in five bullet points.\n\n${article(48, 3)}`],
  [
    'standard',
    'long',
    `List every clause of this agreement that lets a party terminate it, with the notice period.\n\n${contract(70, 4)}`,
  ],
  [
    'standard',
    'long',
    `What are the top three complaints in these reviews, and roughly how often does each come up?\n\n${reviews(300, 5)}`,
  ],
  // extraction into a schema
  [
    'standard',
    'extract',
    withJson(
      'Extract the invoice into the schema. Text: "INVOICE #A-2291  Northwind Supplies, 14 Harbor Rd, Leeds. Bill to: Contoso Retail. Date 03/02/2025, due in 30 days. 12 x USB-C cable @ 4.50; 3 x 27" monitor @ 189.00; 1 x shipping 15.00. Subtotal 636.00, VAT 20% 127.20, total 763.20 GBP."',
      schema({
        number: { type: 'string' },
        vendor: { type: 'string' },
        date: { type: 'string', description: 'ISO 8601' },
        due: { type: 'string', description: 'ISO 8601' },
        lines: {
          type: 'array',
          items: schema({
            description: { type: 'string' },
            quantity: { type: 'number' },
            unitPrice: { type: 'number' },
          }),
        },
        subtotal: { type: 'number' },
        tax: { type: 'number' },
        total: { type: 'number' },
        currency: { type: 'string' },
      }),
    ),
  ],
  [
    'standard',
    'extract',
    withJson(
      'Parse this resume into JSON with name, email, and experience (company, title, start and end as YYYY-MM, highlights): "JORDAN LEE - jordan.lee@example.com. Experience: Acme Corp, Data Engineer, Jan 2021 - present: built the Airflow pipelines feeding the finance warehouse, cut nightly batch time from 6h to 90 min. Globex, Analyst, mid 2018 to Dec 2020: weekly sales dashboards in Tableau; automated the churn report."',
    ),
  ],
  [
    'standard',
    'extract',
    withJson(
      'From this support chat, extract issue, product, severity (low/medium/high), customer_sentiment and next_steps (array).\nCustomer: Hi, since the update yesterday our whole team cannot log into the Pro dashboard, we get "session expired" right after login.\nAgent: Sorry about that! Which browser?\nCustomer: Chrome and Firefox both. We have a client demo in 2 hours, this is really bad.\nAgent: I have escalated to engineering and will call you within 30 minutes with a workaround.',
    ),
  ],
  [
    'standard',
    'extract',
    withJson(
      'Convert this recipe into JSON with ingredients (name, quantity, unit) and numbered steps: "Pancakes: whisk 2 eggs with 300ml milk, add 200g flour and a pinch of salt, rest for 20 minutes. Heat a pan with a little butter, pour about half a ladle per pancake, flip when bubbles appear. Makes 8."',
    ),
  ],
  [
    'standard',
    'extract',
    withJson(
      'Extract every event as a JSON array of {date, people, place, what}: "In June 1858 Darwin received a letter from Wallace, then in the Malay Archipelago, outlining a theory much like his own. On 1 July 1858 papers by both men were read at the Linnean Society in London, with neither present. Darwin published On the Origin of Species on 24 November 1859, and the first printing sold out on the day."',
    ),
  ],
  // agent loops of a few steps
  [
    'standard',
    'agent',
    agent(
      'Add a --verbose flag to the CLI in src/cli.ts that turns on debug logging.',
      [
        [
          {
            tool: 'read_file',
            args: { path: 'src/cli.ts' },
            result:
              "import { parseArgs } from 'node:util';\nimport { run } from './run.js';\nimport { logger } from './log.js';\n\nconst { values } = parseArgs({ options: { config: { type: 'string' }, port: { type: 'string' } } });\nawait run({ config: values.config, port: Number(values.port ?? 8080) });\n",
          },
        ],
        [
          {
            tool: 'read_file',
            args: { path: 'src/log.ts' },
            result:
              "export const logger = { level: 'info', debug(...a: unknown[]) { if (this.level === 'debug') console.log(...a); } };\n",
          },
        ],
      ],
      {},
    ),
  ],
  [
    'standard',
    'agent',
    agent(
      'Run the tests and fix the one that fails.',
      [
        [
          {
            tool: 'run_command',
            args: { command: 'npm test' },
            result:
              'FAIL src/price.test.ts > formats cents\n  AssertionError: expected "$1.5" to be "$1.50"\n   at src/price.test.ts:8:32\nTests: 1 failed, 41 passed',
          },
        ],
        [
          {
            tool: 'read_file',
            args: { path: 'src/price.ts' },
            result: 'export function formatPrice(cents: number): string {\n  return `$${cents / 100}`;\n}\n',
          },
        ],
      ],
      {},
    ),
  ],
  [
    'standard',
    'agent',
    agent(
      'Find where the server config is loaded and let the PORT environment variable override the port.',
      [
        [
          {
            tool: 'search_code',
            args: { pattern: 'loadConfig' },
            result:
              'src/config.ts:12: export function loadConfig(path: string): Config {\nsrc/main.ts:4: const config = loadConfig(argv.config);',
          },
        ],
        [
          {
            tool: 'read_file',
            args: { path: 'src/config.ts' },
            result:
              "import { readFileSync } from 'node:fs';\nexport interface Config { port: number; host: string }\nexport function loadConfig(path: string): Config {\n  const raw = JSON.parse(readFileSync(path, 'utf8'));\n  return { port: raw.port ?? 8080, host: raw.host ?? '0.0.0.0' };\n}\n",
          },
        ],
      ],
      {},
    ),
  ],
  [
    'standard',
    'agent',
    agent(
      'Find me the cheapest flight from Lisbon to Berlin on May 3 and book it if it is under 150 EUR.',
      [
        [
          {
            tool: 'search_flights',
            args: { from: 'LIS', to: 'BER', date: '2025-05-03' },
            result:
              '[{"offer_id":"o1","carrier":"TP","depart":"07:10","price_eur":212},{"offer_id":"o2","carrier":"FR","depart":"13:45","price_eur":129},{"offer_id":"o3","carrier":"U2","depart":"19:20","price_eur":141}]',
          },
        ],
      ],
      { system: 'You are a travel assistant. Confirm bookings in one sentence.', tools: [TOOLS.flights, TOOLS.book] },
    ),
  ],
  [
    'standard',
    'agent',
    agent(
      'I want a refund for order 889, the vase arrived broken.',
      [
        [
          {
            tool: 'get_order',
            args: { order_id: '889' },
            result:
              '{"id":"889","items":[{"sku":"VASE-2","price":45.0}],"shipping":5.0,"status":"delivered","delivered":"2025-03-10"}',
          },
        ],
      ],
      {
        system:
          'You are a support agent for a home goods shop. Damaged items are refunded in full, shipping included, within 30 days of delivery. Today is 2025-03-12.',
        tools: [TOOLS.order, TOOLS.refund],
      },
    ),
  ],
  [
    'standard',
    'agent',
    agent(
      'How many signups did we have last week compared to the week before?',
      [
        [
          {
            tool: 'run_sql',
            args: { query: "SELECT column_name FROM information_schema.columns WHERE table_name = 'signups'" },
            result: 'id, user_id, created_at, plan, referrer',
          },
        ],
      ],
      {
        system: 'You answer questions about the product analytics database. Today is 2025-03-17 (Monday).',
        tools: [TOOLS.sql],
      },
    ),
  ],
  // images that need reading or reasoning
  [
    'standard',
    'image',
    withImage('This is a screenshot of our revenue chart. What trend does it show, and roughly what was March?'),
  ],
  [
    'standard',
    'image',
    withImage('Read the items on this receipt and add up the total, then check it against the printed total.'),
  ],
  [
    'standard',
    'image',
    withImage('This whiteboard photo shows our architecture. List the components and the arrows between them.'),
  ],
  // writing with constraints
  [
    'standard',
    'writing',
    'Write a 300-word cover letter for a junior data analyst role. Mention SQL, Tableau and my four years in retail management; avoid clichés like "team player".',
  ],
  [
    'standard',
    'writing',
    'Outline a product requirements document for an expense-tracking feature in our mobile banking app: goals, user stories, acceptance criteria, and open questions.',
  ],
  [
    'standard',
    'writing',
    'Write a 400-word op-ed arguing for a four-day work week, answering the two strongest counterarguments.',
  ],
  [
    'standard',
    'writing',
    "Draft a reply to a customer whose order was delayed twice. Apologize, offer 15% off their next order, stay under 120 words, and don't admit legal liability.",
  ],
  [
    'standard',
    'writing',
    'Write a 500-word short story in the second person about a lighthouse keeper, with a twist ending.',
  ],
  [
    'standard',
    'writing',
    'Make me a 4-week plan to learn SQL with 5 hours a week: weekly goals, exercises and free resources.',
  ],
  // explanation and comparison
  [
    'standard',
    'analysis',
    'Compare PostgreSQL and MongoDB for the product catalog of a small online shop, and recommend one.',
  ],
  ['standard', 'analysis', 'What are the pros and cons of microservices versus a monolith for a 5-person startup?'],
  ['standard', 'analysis', 'What are the differences between REST and GraphQL, and when would you choose each?'],
  ['standard', 'analysis', 'Explain how the TLS handshake works, for a junior developer.'],
  ['standard', 'analysis', 'Explain the CAP theorem with examples of real databases that choose differently.'],
  // some thinking asked
  [
    'standard',
    'reasoning',
    reasoning(
      'medium',
      'Three boxes are labelled "apples", "oranges" and "apples and oranges", and every label is wrong. You may take one fruit from one box without looking inside. How do you relabel all three boxes correctly?',
    ),
  ],
  [
    'standard',
    'reasoning',
    reasoning(
      'medium',
      'Plan a 3-day trip to Rome for a family with a toddler: little walking, one museum a day, naps after lunch.',
    ),
  ],
  ['standard', 'reasoning', reasoning('low', 'Is 2^31 - 1 prime? Explain how you would check it.')],
  ['standard', 'reasoning', 'Prove that the square root of 2 is irrational.'],
];

/** A coding agent's long session: many reads, edits and test runs, then more asked. */
function longSession(task: string, files: string[], followUp: string): Ask {
  const steps: ToolStep[][] = [[{ tool: 'list_dir', args: { path: 'src' }, result: files.join('\n') }]];
  for (const [i, f] of files.entries()) {
    steps.push([{ tool: 'read_file', args: { path: f }, result: codebase(2, 100 + i) }]);
    if (i % 2 === 1)
      steps.push([
        {
          tool: 'edit_file',
          args: { path: f, old_string: 'cache.get(', new_string: 'await cache.get(' },
          result: 'ok',
        },
      ]);
  }
  steps.push([
    {
      tool: 'run_command',
      args: { command: 'npm test' },
      result:
        'FAIL src/orders/order-service-3.test.ts > update keeps the version monotonic\n  expected 4 to be 3\nTests: 1 failed, 212 passed',
    },
  ]);
  return agent(task, steps, { followUp });
}

// ---------------------------------------------------------------- frontier
const FRONTIER: Entry[] = [
  // proofs
  [
    'frontier',
    'proof',
    'Prove that the number of partitions of n into distinct parts equals the number of partitions of n into odd parts, with a bijection rather than generating functions.',
  ],
  [
    'frontier',
    'proof',
    'Let f be continuous on [0,1] with f(0) = f(1). Prove that for every positive integer n there is x with f(x + 1/n) = f(x), and show that for any a in (0,1) not of the form 1/n this can fail.',
  ],
  ['frontier', 'proof', 'Prove that there is no simple group of order 132.'],
  [
    'frontier',
    'proof',
    'Let p > 3 be prime. Prove that the sum of the quadratic residues modulo p, taken in 1..p-1, is divisible by p.',
  ],
  [
    'frontier',
    'proof',
    'Show that deciding whether a Turing machine halts on the empty input is undecidable, by a reduction from the halting problem. Write the reduction carefully.',
  ],
  [
    'frontier',
    'proof',
    'Write a Lean 4 proof, without Mathlib, that reversing a list twice gives back the list. State the helper lemmas you need and prove them too.',
  ],
  // system design
  [
    'frontier',
    'design',
    'Design a multi-region, active-active payment ledger that posts each transfer exactly once at 50k transfers per second. Cover the data model, consistency, failure modes and reconciliation.',
  ],
  [
    'frontier',
    'design',
    'How would you build the backend of a real-time collaborative document editor like Google Docs for 10M daily users? CRDT or OT, storage, presence, offline edits and their merge.',
  ],
  [
    'frontier',
    'design',
    'We need a feature store for online ML serving: p99 reads under 10 ms, backfills, and point-in-time correct training data. Lay out how you would build it and why.',
  ],
  [
    'frontier',
    'design',
    'We must move a 5 TB PostgreSQL monolith to sharded storage with no downtime. Plan the migration: dual writes, backfill, verification, cutover and rollback.',
  ],
  [
    'frontier',
    'design',
    'Our API gateway runs in 12 regions. We want per-tenant rate limits accurate to 5% with under 1 ms added latency. Which algorithm, how is state shared, and what happens during a region partition?',
  ],
  [
    'frontier',
    'design',
    'Build a scheduler for GPU inference jobs across heterogeneous clusters that maximizes utilization while meeting per-tenant latency SLOs. Include preemption and fairness.',
  ],
  // hard debugging
  [
    'frontier',
    'debug',
    'This Go worker pool hangs under load every few hours. Find the cause:\n```go\ntype Pool struct { mu sync.Mutex; jobs chan Job; results chan Result; pending int }\nfunc (p *Pool) Submit(j Job) { p.mu.Lock(); p.pending++; p.jobs <- j; p.mu.Unlock() }\nfunc (p *Pool) worker() { for j := range p.jobs { r := j.Run(); p.mu.Lock(); p.pending--; p.mu.Unlock(); p.results <- r } }\nfunc (p *Pool) Drain() []Result { var out []Result; for { p.mu.Lock(); n := p.pending; p.mu.Unlock(); if n == 0 { return out }; out = append(out, <-p.results) } }\n```\njobs and results are buffered with capacity 64; 8 workers; Submit is called from HTTP handlers while another goroutine calls Drain every second.',
  ],
  [
    'frontier',
    'debug',
    'Our Node.js service grows by ~50 MB an hour until it is OOM-killed. Heap snapshots show growing arrays of closures retained by EventEmitter listeners on a shared `bus`, and a Map in `sessionCache` that never shrinks. Each request does `bus.on("config", (c) => applyConfig(req, c))` and caches `sessionCache.set(req.id, { req, timer: setTimeout(expire, ttl) })`, with expire deleting by `req.sessionId`. Explain every leak and give a fix.',
  ],
  [
    'frontier',
    'debug',
    'This lock-free stack sometimes loses elements under contention. Explain precisely why, and fix it without a mutex:\n```cpp\nstruct Node { int v; Node* next; };\nstd::atomic<Node*> head;\nvoid push(int v) { Node* n = new Node{v, head.load()}; while (!head.compare_exchange_weak(n->next, n)); }\nint pop() { Node* h = head.load(); while (h && !head.compare_exchange_weak(h, h->next)); int v = h->v; delete h; return v; }\n```',
  ],
  [
    'frontier',
    'debug',
    'My Kubernetes operator reconciles the same object in a hot loop, thousands of times a minute. The reconcile reads the object, computes status.conditions with a fresh lastTransitionTime on each run, and calls UpdateStatus. The controller watches the primary kind and the Deployments it owns. Why does it loop, and what is the right fix, in detail?',
  ],
  [
    'frontier',
    'debug',
    'After a consumer-group rebalance, our Kafka consumers sometimes process a message twice, and once we saw a message skipped. We commit offsets asynchronously every 5 s, process in a thread pool, and write results to Postgres. Explain both the duplicate and the skip, and design a fix that gives effectively-once results.',
  ],
  // long multi-step coding
  [
    'frontier',
    'agent',
    longSession(
      'Migrate the repository from CommonJS to ESM: package.json type module, import paths with .js, the test runner config, and CI. Keep the public API the same.',
      [
        'src/index.ts',
        'src/users/user-service-0.ts',
        'src/orders/order-service-3.ts',
        'src/cache.ts',
        'src/db.ts',
        'test/setup.ts',
      ],
      'Good progress. The order test now fails on the version check, fix it, then finish the migration and make CI green.',
    ),
  ],
  [
    'frontier',
    'agent',
    longSession(
      'Add OAuth2 login with PKCE: backend endpoints for the authorization redirect and the code exchange, refresh-token rotation, and the frontend flow. Sessions must survive a restart.',
      ['src/auth/login.ts', 'src/auth/session.ts', 'src/server.ts', 'web/src/App.tsx', 'web/src/api.ts'],
      'Also handle the case where the refresh token was already used (reuse detection): revoke the whole family.',
    ),
  ],
  [
    'frontier',
    'agent',
    longSession(
      'Refactor the payment module to support multiple currencies, keeping the old single-currency API working for existing callers and migrating stored amounts.',
      [
        'src/payments/money.ts',
        'src/payments/charge.ts',
        'src/payments/refund.ts',
        'src/db.ts',
        'migrations/0042.sql',
        'src/payments/report.ts',
        'src/payments/fx.ts',
      ],
      'The finance report must still add up to the cent after the migration; prove that your rounding cannot drift.',
    ),
  ],
  [
    'frontier',
    'agent',
    longSession(
      'The cache layer serves stale orders after updates. Find every path where an update does not invalidate, fix them, and add tests that would have caught it.',
      [
        'src/cache.ts',
        'src/orders/order-service-1.ts',
        'src/orders/order-service-3.ts',
        'src/coupons/coupon-service-2.ts',
      ],
      'Now make invalidation work across our 3 replicas too (they each have their own in-memory cache).',
    ),
  ],
  [
    'frontier',
    'agent',
    longSession(
      'Implement optimistic concurrency for all update endpoints: clients send If-Match with the version, the server answers 412 on conflict, and retries in the batch importer handle it.',
      [
        'src/http/routes.ts',
        'src/users/user-service-0.ts',
        'src/orders/order-service-3.ts',
        'src/import/batch.ts',
        'src/db.ts',
      ],
      'The batch importer still double-applies a row when two importers run at once. Fix that as well.',
    ),
  ],
  [
    'frontier',
    'agent',
    agent(
      'Write a Raft-based replicated key-value store in Go: leader election, log replication, snapshots, and a linearizable read path. Start with the package layout and the election.',
      [
        [{ tool: 'list_dir', args: { path: '.' }, result: 'go.mod\nREADME.md' }],
        [{ tool: 'write_file', args: { path: 'raft/state.go', content: 'package raft\n' }, result: 'ok' }],
      ],
      {},
    ),
  ],
  // hard math
  ['frontier', 'math', 'Find all functions f: R -> R such that f(x + y) + f(xy) = f(x) f(y) + 1 for all real x, y.'],
  [
    'frontier',
    'math',
    'In how many ways can a 3 x 12 board be tiled with 2 x 1 dominoes? Derive the recurrence and solve it.',
  ],
  [
    'frontier',
    'math',
    'A fair coin is flipped until the pattern HTHH appears. What is the expected number of flips? Then the same for HHTH, and explain why they differ.',
  ],
  ['frontier', 'math', 'Evaluate the integral of ln(x) / (1 + x^2)^2 from 0 to infinity.'],
  ['frontier', 'math', 'Determine all positive integers n such that n^2 divides 2^n + 1.'],
  // much thinking asked
  [
    'frontier',
    'reasoning',
    reasoning(
      'high',
      'Five friends each own a different pet, drink a different drink and live in a row of houses of different colors. The Norwegian lives in the first house; the green house is directly left of the white one; the person in the middle house drinks milk; the Dane drinks tea; the owner of the fish lives next to the one who drinks water; the Swede keeps dogs; the Brit lives in the red house; the German smokes Prince; the coffee drinker lives in the green house; the Blend smoker lives next to the cat owner. With the other classic clues, who owns the fish? Work it out fully.',
    ),
  ],
  [
    'frontier',
    'reasoning',
    reasoning(
      'high',
      'Using the tables events(user_id, ts, type), subscriptions(user_id, started, ended, plan) and refunds(user_id, ts), write one SQL query for monthly cohort retention where a user counts as retained in a month only if active and not refunded within 14 days, and reason through every edge case (plan changes, reactivations, time zones).',
    ),
  ],
  [
    'frontier',
    'reasoning',
    reasoning(
      'high',
      'A shuttle serves 6 stops with travel times given below, and 9 ride requests each with a pickup window. Find the schedule minimizing total lateness, and argue why no better one exists.\nTimes (min): A-B 7, B-C 4, C-D 9, D-E 3, E-F 6, A-F 12, B-E 10.\nRequests: 1 A->D [8:00-8:10], 2 B->F [8:05-8:20], 3 C->A [8:10-8:30], 4 F->B [8:15-8:25], 5 D->E [8:20-8:35], 6 E->C [8:25-8:45], 7 A->F [8:30-8:40], 8 B->D [8:40-8:55], 9 F->A [8:50-9:05].',
    ),
  ],
  [
    'frontier',
    'reasoning',
    reasoning(
      'high',
      'Our SaaS has 3 plans and these conversion numbers per price point (below). Estimate price elasticity per plan, find the revenue-maximizing prices under the constraint that Pro stays at least 2x Basic, and state the assumptions that most change the answer.\nBasic: $9 -> 4.1%, $12 -> 3.4%, $15 -> 2.6%\nPro: $29 -> 2.2%, $39 -> 1.8%, $49 -> 1.1%\nTeam: $99 -> 0.9%, $129 -> 0.8%, $159 -> 0.5%',
    ),
  ],
  // security
  [
    'frontier',
    'security',
    'Threat-model a multi-tenant SaaS that lets customers upload and run Python notebooks on shared Kubernetes nodes. Identify the attack paths between tenants and the controls for each.',
  ],
  [
    'frontier',
    'security',
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the prompt quotes JavaScript with a template literal
    'Review this login code for vulnerabilities and explain how each could be exploited:\n```js\napp.post("/login", async (req, res) => {\n  const user = await db.one(`SELECT * FROM users WHERE email = \'${req.body.email}\'`);\n  if (user.password === sha1(req.body.password)) {\n    const token = jwt.sign({ id: user.id, admin: user.admin }, process.env.SECRET, { algorithm: "HS256" });\n    res.cookie("token", token);\n    return res.redirect(req.query.next);\n  }\n  res.status(401).send("bad password for " + req.body.email);\n});\napp.use((req, res, next) => { req.user = jwt.decode(req.cookies.token); next(); });\n```',
  ],
  [
    'frontier',
    'security',
    'Our decryption endpoint returns 400 for bad padding and 403 for a bad MAC, and uses AES-CBC then HMAC over the plaintext. Explain the padding-oracle attack this allows, step by step, and how to redesign it.',
  ],
  // long contexts that need reasoning across them
  [
    'frontier',
    'long',
    `Here are the logs of all services during yesterday's incident. Reconstruct the timeline, find the root cause, and explain how it spread from one service to the others.\n\n${serviceLogs(480, 6)}`,
  ],
  [
    'frontier',
    'long',
    `Below are the original agreement and an amendment. Which obligations did the amendment change, which clauses now contradict each other, and which party benefits from each change?\n\nORIGINAL\n${contract(60, 7)}\n\nAMENDMENT No. 1\n${contract(25, 8)}`,
  ],
  [
    'frontier',
    'long',
    `Here is our service code. Updates sometimes leave stale data in the cache for minutes. Find every path that causes it and propose a patch that fixes them all.\n\n${codebase(40, 9)}`,
  ],
  // algorithms
  [
    'frontier',
    'algorithm',
    'Given n jobs with release times, deadlines and processing times on m identical machines with migration allowed, give an algorithm that decides feasibility in polynomial time, prove it correct, and state its complexity.',
  ],
  [
    'frontier',
    'algorithm',
    'Implement a persistent red-black tree in Haskell with insert and delete, keeping O(log n) per operation, and explain how the deletion rebalancing preserves the invariants.',
  ],
];

const DIALECTS: readonly BenchDialect[] = [
  'openai-chat',
  'openai-chat',
  'openai-chat',
  'openai-responses',
  'anthropic-messages',
];

/** The labelled requests, in a fixed order, each with its dialect and half. */
export function labelledSet(): LabelledRequest[] {
  const entries = [...LIGHT, ...STANDARD, ...FRONTIER];
  const counts = new Map<string, number>();
  return entries.map(([tier, kind, ask], i) => {
    const n = (counts.get(`${tier}-${kind}`) ?? 0) + 1;
    counts.set(`${tier}-${kind}`, n);
    const dialect = DIALECTS[i % DIALECTS.length] as BenchDialect;
    return {
      id: `${tier}-${kind}-${n}`,
      tier,
      kind,
      dialect,
      half: i % 2 === 0 ? 'tuning' : 'heldOut',
      body: bodyOf(dialect, typeof ask === 'string' ? user(ask) : ask),
    };
  });
}
