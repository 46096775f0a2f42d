// tool_choice on a real model (the embedded tiny V4.1 weights on the CPU oracle behind the lane
// core) through the official `openai` client: `required` with several tools always calls one of
// them (the lane core holds the call block to the tools' grammar), streamed and not, drafted or not, for several seeds;
// `none` never calls; `auto` decodes unconstrained. Expected values are API invariants (the names
// the request offered, JSON.parse of the arguments) and, for `auto`, the reply's own raw logprobs:
// a greedy, unmasked draw is always the row's best token.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './harness.mjs';

const MODEL = 'deepseek-v4';
// Names that share tokens, one a prefix of another.
const NAMES = ['get_weather', 'get_weather_forecast', 'search_news'];
// A bounded argument and one call per block, so that random weights close the block within max_tokens.
const tool = (name) => ({ type: 'function', function: { name, description: `the ${name} tool`, parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 6 } } } } });
const tools = NAMES.map(tool);
const base = { model: MODEL, messages: [{ role: 'user', content: 'What is the weather in Paris tomorrow?' }], tools, max_tokens: 128, chat_template_kwargs: { thinking: false } };

let server;
let client;
before(async () => {
  server = await startServer(['--context', '1024', '--parallel', '4', '--max-tokens', '128'], { fake: false, readyTimeoutMs: 240000 });
  client = server.client();
});
after(async () => server.stop());

async function collect(stream) {
  const out = { content: '', calls: [], finish: null };
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    out.content += c.delta?.content ?? '';
    for (const t of c.delta?.tool_calls ?? []) {
      out.calls[t.index] ??= { id: '', name: '', arguments: '' };
      if (t.id) out.calls[t.index].id = t.id;
      if (t.function?.name) out.calls[t.index].name += t.function.name;
      if (t.function?.arguments) out.calls[t.index].arguments += t.function.arguments;
    }
    if (c.finish_reason) out.finish = c.finish_reason;
  }
  return out;
}

function assertObjectArguments(text, what) {
  const args = JSON.parse(text);
  assert.equal(typeof args, 'object', what);
  assert.ok(args !== null && !Array.isArray(args), what);
}

test('tool_choice required with three tools calls one of them, streamed and not, drafted or not', async () => {
  const seen = new Set();
  for (const [seed, temperature] of [[1, 2], [2, 2], [3, 2], [4, 1.5], [5, 1.2], [6, 1], [7, 0]]) {
    const req = { ...base, tool_choice: 'required', parallel_tool_calls: false, seed, temperature };
    const whole = await client.chat.completions.create(req);
    const c = whole.choices[0];
    const what = `seed ${seed}: ${JSON.stringify(c.message)}`;
    assert.equal(c.finish_reason, 'tool_calls', what);
    assert.ok(c.message.tool_calls.length >= 1, what);
    assert.ok(NAMES.includes(c.message.tool_calls[0].function.name), what);
    assert.equal(c.message.tool_calls[0].type, 'function');
    assertObjectArguments(c.message.tool_calls[0].function.arguments, what);
    assert.ok(!c.message.content, what);
    seen.add(c.message.tool_calls[0].function.name);

    const streamed = await collect(await client.chat.completions.create({ ...req, stream: true }));
    assert.equal(streamed.finish, 'tool_calls', `seed ${seed} streamed`);
    assert.equal(streamed.calls[0].name, c.message.tool_calls[0].function.name);
    assert.equal(streamed.calls[0].arguments, c.message.tool_calls[0].function.arguments);
    assert.match(streamed.calls[0].id, /^call_/);
    assert.equal(streamed.content, '');

    const serial = await client.chat.completions.create({ ...req, draft: false });
    assert.deepEqual(serial.choices[0].message.tool_calls.map((t) => t.function),
                     c.message.tool_calls.map((t) => t.function), `seed ${seed} draft false`);
  }
  // Every tokenization of a name is allowed, and these random weights favour one first token ('se') by about 3 nats
  // over the others: the hotter draws are where the other names come up.
  assert.ok(seen.size >= 2, `the draws choose among the names: ${[...seen]}`);
});

test('tool_choice none never calls', async () => {
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({ ...base, tool_choice: 'none', seed, temperature: 1 });
    const c = r.choices[0];
    assert.ok(!c.message.tool_calls || c.message.tool_calls.length === 0);
    assert.notEqual(c.finish_reason, 'tool_calls');
  }
});

test('tool_choice auto decodes unconstrained: every greedy token is its row\'s best', async () => {
  const r = await client.chat.completions.create({ ...base, tool_choice: 'auto', temperature: 0, logprobs: true, top_logprobs: 1 });
  const entries = r.choices[0].logprobs.content;
  assert.ok(entries.length > 0);
  for (const e of entries) assert.equal(e.logprob, e.top_logprobs[0].logprob, JSON.stringify(e));
  // And the same request with tool_choice required does constrain: its first reply token is a name's.
  const q = await client.chat.completions.create({ ...base, tool_choice: 'required', temperature: 0 });
  assert.ok(NAMES.includes(q.choices[0].message.tool_calls[0].function.name));
});
