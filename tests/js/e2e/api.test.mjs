// The OpenAI API surface through the official `openai` npm client: chat, completions, streaming
// with usage, logprobs, forced_tokens, a tool-call round trip, thinking on/off, stop strings,
// seeds, parallel == solo, draft on == off, auth. Scripted replies follow the fake engine's
// documented script (src/server/fake_engine.h): "say:TEXT" -> TEXT, "call:NAME ARGS" -> a tool call.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { startServer, request, BIN } from './harness.mjs';

let server;
let client;
before(async () => {
  server = await startServer(['--fake-token-ms', '1']);
  client = server.client();
});
after(async () => server.stop());

const user = (content) => [{ role: 'user', content }];
const sum = (xs) => xs.reduce((a, b) => a + b, 0);

async function collect(stream) {
  const out = { content: '', reasoning: '', calls: [], finish: null, usage: null, logprobs: [], chunks: 0 };
  for await (const chunk of stream) {
    out.chunks += 1;
    if (chunk.usage) out.usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta?.content) out.content += c.delta.content;
    if (c.delta?.reasoning_content) out.reasoning += c.delta.reasoning_content;
    for (const t of c.delta?.tool_calls ?? []) {
      out.calls[t.index] ??= { id: '', name: '', arguments: '' };
      if (t.id) out.calls[t.index].id = t.id;
      if (t.function?.name) out.calls[t.index].name += t.function.name;
      if (t.function?.arguments) out.calls[t.index].arguments += t.function.arguments;
    }
    if (c.logprobs?.content) out.logprobs.push(...c.logprobs.content);
    if (c.text !== undefined) out.content += c.text;
    if (c.finish_reason) out.finish = c.finish_reason;
  }
  return out;
}

test('models lists the served model with its context length', async () => {
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].id, 'deepseek-v4');
  assert.equal(models.data[0].object, 'model');
  assert.equal(models.data[0].max_model_len, 4096);
});

test('chat completion', async () => {
  const r = await client.chat.completions.create({ model: 'deepseek-v4', messages: user('say:hello world') });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].message.content, 'hello world');
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(r.usage.prompt_tokens > 0);
  assert.equal(r.usage.completion_tokens, 'hello world'.length + 1); // one byte per token + EOS
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(typeof r.usage.prompt_tokens_details.cached_tokens, 'number');
});

test('completion, from text and from token ids', async () => {
  const r = await client.completions.create({ model: 'deepseek-v4', prompt: 'say:abc' });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].text, 'abc');
  assert.equal(r.choices[0].finish_reason, 'stop');
  const ids = [...Buffer.from('say:xyz')];
  const r2 = await client.completions.create({ model: 'deepseek-v4', prompt: ids, max_tokens: 2 });
  assert.equal(r2.choices[0].text, 'xy');
  assert.equal(r2.choices[0].finish_reason, 'length');
  assert.equal(r2.usage.prompt_tokens, ids.length);
});

test('streaming equals the whole reply, with usage in its own final chunk', async () => {
  const body = { model: 'deepseek-v4', messages: user('tell me'), temperature: 1, seed: 7, max_tokens: 40 };
  const whole = await client.chat.completions.create(body);
  const s = await collect(await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } }));
  assert.equal(s.content, whole.choices[0].message.content);
  assert.equal(s.finish, whole.choices[0].finish_reason);
  assert.equal(s.usage.completion_tokens, whole.usage.completion_tokens);
  assert.equal(s.usage.prompt_tokens, whole.usage.prompt_tokens);
  // Without include_usage no usage arrives.
  const s2 = await collect(await client.chat.completions.create({ ...body, stream: true }));
  assert.equal(s2.usage, null);
  assert.equal(s2.content, s.content);
  // Completions stream too.
  const c = await collect(await client.completions.create({ model: 'deepseek-v4', prompt: 'say:streamed text', stream: true, stream_options: { include_usage: true } }));
  assert.equal(c.content, 'streamed text');
  assert.equal(c.usage.completion_tokens, 'streamed text'.length + 1);
});

function checkTop(entries, n) {
  for (const e of entries) {
    assert.equal(typeof e.token_id, 'number');
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, n);
    for (let i = 1; i < n; i++) assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob);
    assert.equal(Buffer.from(e.bytes).toString('utf8'), e.token);
    for (const t of e.top_logprobs) assert.equal(Buffer.from(t.bytes).toString('utf8'), t.token);
  }
}

test('chat logprobs (whole and streamed) agree and carry token ids', async () => {
  const body = { model: 'deepseek-v4', messages: user('say:logprob me'), logprobs: true, top_logprobs: 3 };
  const r = await client.chat.completions.create(body);
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, r.usage.completion_tokens);
  checkTop(lp, 3);
  assert.deepEqual(lp.slice(0, 'logprob me'.length).map((e) => e.token_id), [...Buffer.from('logprob me')]);
  const s = await collect(await client.chat.completions.create({ ...body, stream: true }));
  assert.deepEqual(s.logprobs, lp);
});

test('completions logprobs in the completions shape', async () => {
  const r = await client.completions.create({ model: 'deepseek-v4', prompt: 'say:abcd', logprobs: 2 });
  const lp = r.choices[0].logprobs;
  const n = r.usage.completion_tokens;
  for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset', 'token_ids']) assert.equal(lp[k].length, n, k);
  assert.deepEqual(lp.text_offset.slice(0, 4), [0, 1, 2, 3]);
  assert.deepEqual(lp.token_ids.slice(0, 4), [...Buffer.from('abcd')]);
  assert.equal(lp.tokens.slice(0, 4).join(''), 'abcd');
  for (const m of lp.top_logprobs) assert.equal(Object.keys(m).length, 2);
});

test('forced_tokens scores a given continuation without sampling', async () => {
  const forced = [...Buffer.from('forced!')];
  const r = await client.chat.completions.create({ model: 'deepseek-v4', messages: user('anything'), forced_tokens: forced, top_logprobs: 2, logprobs: true });
  assert.equal(r.choices[0].message.content, 'forced!');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, forced.length);
  assert.deepEqual(r.choices[0].logprobs.content.map((e) => e.token_id), forced);
  // As text, on completions, logprobs implied.
  const c = await client.completions.create({ model: 'deepseek-v4', prompt: 'x', forced_tokens: 'ok go' });
  assert.equal(c.choices[0].text, 'ok go');
  assert.deepEqual(c.choices[0].logprobs.token_ids, [...Buffer.from('ok go')]);
  // Stop strings do not cut a forced continuation.
  const c2 = await client.completions.create({ model: 'deepseek-v4', prompt: 'x', forced_tokens: 'a STOP b', stop: ['STOP'] });
  assert.equal(c2.choices[0].text, 'a STOP b');
});

const tools = [{ type: 'function', function: { name: 'get_weather', description: 'weather for a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];

test('tool-call round trip', async () => {
  const messages = user('call:get_weather {"city":"Paris"}');
  const r = await client.chat.completions.create({ model: 'deepseek-v4', messages, tools });
  const msg = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(msg.content, null);
  assert.equal(msg.tool_calls.length, 1);
  assert.equal(msg.tool_calls[0].type, 'function');
  assert.equal(msg.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(msg.tool_calls[0].function.arguments), { city: 'Paris' });
  // Streamed, the deltas add up to the same call.
  const s = await collect(await client.chat.completions.create({ model: 'deepseek-v4', messages, tools, stream: true }));
  assert.equal(s.finish, 'tool_calls');
  assert.equal(s.calls.length, 1);
  assert.equal(s.calls[0].name, 'get_weather');
  assert.equal(s.calls[0].arguments, msg.tool_calls[0].function.arguments);
  assert.ok(s.calls[0].id.length > 0);
  // Send the call and its result back.
  const r2 = await client.chat.completions.create({
    model: 'deepseek-v4',
    tools,
    messages: [...messages, msg, { role: 'tool', tool_call_id: msg.tool_calls[0].id, content: '18C and sunny' }],
  });
  assert.equal(r2.choices[0].message.content, 'the tool said 18C and sunny');
  assert.equal(r2.choices[0].finish_reason, 'stop');
  // tool_choice none: the markup stays content.
  const r3 = await client.chat.completions.create({ model: 'deepseek-v4', messages, tools, tool_choice: 'none' });
  assert.equal(r3.choices[0].message.tool_calls, undefined);
  assert.equal(r3.choices[0].message.content, '<tool>get_weather {"city":"Paris"}</tool>');
});

test('thinking on and off', async () => {
  const on = await client.chat.completions.create({ model: 'deepseek-v4', messages: user('say:answer'), chat_template_kwargs: { thinking: true } });
  assert.equal(on.choices[0].message.reasoning_content, 'hmm, let me think');
  assert.equal(on.choices[0].message.content, 'answer');
  assert.equal(on.usage.completion_tokens_details.reasoning_tokens, 'hmm, let me think</think>'.length);
  const off = await client.chat.completions.create({ model: 'deepseek-v4', messages: user('say:answer'), chat_template_kwargs: { thinking: false } });
  assert.equal(off.choices[0].message.reasoning_content, undefined);
  assert.equal(off.choices[0].message.content, 'answer');
  const s = await collect(await client.chat.completions.create({ model: 'deepseek-v4', messages: user('say:answer'), thinking: { type: 'enabled' }, stream: true }));
  assert.equal(s.reasoning, 'hmm, let me think');
  assert.equal(s.content, 'answer');
  // Assistant history with reasoning_content is accepted.
  const r = await client.chat.completions.create({
    model: 'deepseek-v4',
    messages: [...user('hi'), { role: 'assistant', content: 'yo', reasoning_content: 'greeting' }, ...user('say:again')],
    reasoning_effort: 'max',
  });
  assert.equal(r.choices[0].message.content, 'again');
});

test('stop strings end the reply before the match, streamed or not', async () => {
  const body = { model: 'deepseek-v4', messages: user('say:one two STOP three'), stop: ['STOP', 'never'] };
  const r = await client.chat.completions.create(body);
  assert.equal(r.choices[0].message.content, 'one two ');
  assert.equal(r.choices[0].finish_reason, 'stop');
  const s = await collect(await client.chat.completions.create({ ...body, stream: true }));
  assert.equal(s.content, 'one two ');
  assert.equal(s.finish, 'stop');
  const c = await client.completions.create({ model: 'deepseek-v4', prompt: 'say:abcXYZdef', stop: 'XYZ' });
  assert.equal(c.choices[0].text, 'abc');
});

test('seeds reproduce; different seeds differ', async () => {
  const body = { model: 'deepseek-v4', messages: user('write something'), temperature: 0.8, max_tokens: 30 };
  const a = await client.chat.completions.create({ ...body, seed: 42 });
  const b = await client.chat.completions.create({ ...body, seed: 42 });
  const c = await client.chat.completions.create({ ...body, seed: 43 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.notEqual(a.choices[0].message.content, c.choices[0].message.content);
});

test('N parallel requests equal their solo runs; draft off equals draft on', async () => {
  const bodies = Array.from({ length: 8 }, (_, i) => ({ model: 'deepseek-v4', messages: user(`prompt number ${i}`), temperature: 1, seed: 1000 + i, max_tokens: 48, logprobs: true, top_logprobs: 2 }));
  const solo = [];
  for (const b of bodies) solo.push(await client.chat.completions.create(b));
  const together = await Promise.all(bodies.map((b) => client.chat.completions.create(b)));
  const serial = await Promise.all(bodies.map((b) => client.chat.completions.create({ ...b, draft: false })));
  for (let i = 0; i < bodies.length; i++) {
    assert.equal(together[i].choices[0].message.content, solo[i].choices[0].message.content);
    assert.deepEqual(together[i].choices[0].logprobs, solo[i].choices[0].logprobs);
    assert.equal(serial[i].choices[0].message.content, solo[i].choices[0].message.content);
    assert.deepEqual(serial[i].choices[0].logprobs, solo[i].choices[0].logprobs);
  }
});

test('n choices: choice 0 is the solo request; streamed chunks carry each index; usage sums', async () => {
  const body = { model: 'deepseek-v4', messages: user('tell me'), temperature: 1, seed: 7, max_tokens: 40 };
  const r = await client.chat.completions.create({ ...body, n: 3 });
  const solo = await client.chat.completions.create(body);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(r.choices[0].message.content, solo.choices[0].message.content);
  assert.notEqual(r.choices[1].message.content, r.choices[0].message.content);
  const stream = await client.chat.completions.create({ ...body, n: 3, stream: true, stream_options: { include_usage: true } });
  const content = ['', '', ''];
  const usages = [];
  for await (const chunk of stream) {
    if (chunk.usage) usages.push(chunk.usage);
    for (const c of chunk.choices) content[c.index] += c.delta?.content ?? '';
  }
  assert.deepEqual(content, r.choices.map((c) => c.message.content));
  assert.equal(usages.length, 1);
  assert.equal(usages[0].completion_tokens, r.usage.completion_tokens);
  assert.equal(r.usage.prompt_tokens, solo.usage.prompt_tokens);
  // The fake engine's reply is its text's bytes and an end-of-sequence token, or max_tokens of them.
  const tokens = (c) => (c.finish_reason === 'length' ? 40 : Buffer.byteLength(c.message.content) + 1);
  assert.equal(r.usage.completion_tokens, sum(r.choices.map(tokens)));
});

test('refusals come back as OpenAI errors through the client', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'deepseek-v4', messages: user('x'), n: 17 }), (e) => e.status === 400 && e.error.param === 'n');
  await assert.rejects(client.chat.completions.create({ model: 'other', messages: user('x') }), (e) => e.status === 404 && e.error.code === 'model_not_found');
  await assert.rejects(client.chat.completions.create({ model: 'deepseek-v4', messages: user('x'), max_tokens: 5000 }), (e) => e.status === 400 && e.error.param === 'max_tokens');
  await assert.rejects(client.chat.completions.create({ model: 'deepseek-v4', messages: user('x'.repeat(5000)) }), (e) => e.status === 400 && e.error.code === 'context_length_exceeded');
});

test('--api-key requires a bearer token on /v1, not on /health', async () => {
  const s = await startServer(['--api-key', 'sekret']);
  try {
    const none = await request(s.url, { body: { messages: user('say:x') } });
    assert.equal(none.status, 401);
    assert.equal(JSON.parse(none.body).error.code, 'invalid_api_key');
    const wrong = await request(s.url, { body: { messages: user('say:x') }, headers: { authorization: 'Bearer sekreT' } });
    assert.equal(wrong.status, 401);
    const ok = await s.client({ apiKey: 'sekret' }).chat.completions.create({ model: 'deepseek-v4', messages: user('say:x') });
    assert.equal(ok.choices[0].message.content, 'x');
    const h = await request(s.url, { method: 'GET', path: '/health' });
    assert.equal(h.status, 200);
  } finally {
    await s.stop();
  }
});

test('dsv4 chat streams replies in a terminal session and keeps the history', async () => {
  const input = 'say:hello there\n/think off\nsay:second turn\n/quit\n';
  const { stdout, stderr, status } = await new Promise((resolve) => {
    resolve(spawnSync(BIN, ['chat', '--url', server.url, '--usage'], { input, encoding: 'utf8', timeout: 20000 }));
  });
  assert.equal(status, 0, stderr);
  // Thinking is on by default (the fake reasons first); /think off turns it off for the next turn.
  assert.equal(stdout, 'hmm, let me think\n\nhello there\nsecond turn\n');
  const usage = [...stderr.matchAll(/\[(\d+) prompt tokens \((\d+) cached\), (\d+) completion tokens\]/g)];
  assert.equal(usage.length, 2);
  assert.ok(Number(usage[1][1]) > Number(usage[0][1])); // the second prompt carries the first turn
});
