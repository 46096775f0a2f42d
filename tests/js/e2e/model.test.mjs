// `dsv4 serve` on a real model: the embedded default model (tiny synthetic V4.1 weights) on the CPU
// oracle behind the lane core, with the V4.1 tokenizer, chat encoder and DSML parser. Expected
// values come from invariants (argmax = top-1, streamed = whole, concurrent = solo) and from
// @huggingface/tokenizers on the same tokenizer.json, never from the server itself.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import zlib from 'node:zlib';
import { Tokenizer } from '@huggingface/tokenizers';
import { startServer, health, waitFor } from './harness.mjs';

let server;
let client;
before(async () => {
  server = await startServer(['--context', '2048', '--parallel', '4'], { fake: false, readyTimeoutMs: 240000 });
  client = server.client();
});
after(async () => server.stop());

const user = (content) => [{ role: 'user', content }];
const noThink = { chat_template_kwargs: { thinking: false } };

async function collect(stream) {
  const out = { content: '', finish: null, usage: null, logprobs: [] };
  for await (const chunk of stream) {
    if (chunk.usage) out.usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    out.content += c.delta?.content ?? c.text ?? '';
    if (c.logprobs?.content) out.logprobs.push(...c.logprobs.content);
    if (c.finish_reason) out.finish = c.finish_reason;
  }
  return out;
}

test('prompt tokens match @huggingface/tokenizers on the V4.1 tokenizer.json (plus BOS)', async () => {
  const json = JSON.parse(zlib.gunzipSync(fs.readFileSync(new URL('../../../src/tokenizer/data/deepseek_v41_tokenizer.json.gz', import.meta.url))).toString('utf8'));
  const tok = new Tokenizer(json, { clean_up_tokenization_spaces: false });
  for (const text of ['Hello world', 'Ünïcødé and 中文 text, with   spaces\nand lines', 'x = [1, 2, 3]  # code']) {
    const r = await client.completions.create({ model: 'deepseek-v4', prompt: text, max_tokens: 1, temperature: 0 });
    assert.equal(r.usage.prompt_tokens, tok.encode(text, { add_special_tokens: false }).ids.length + 1, text);
  }
});

test('greedy: the chosen token is the top-1 alternative, streamed equals whole', async () => {
  const body = { model: 'deepseek-v4', messages: user('Hello there'), temperature: 0, max_tokens: 8, logprobs: true, top_logprobs: 3, ...noThink };
  const r = await client.chat.completions.create(body);
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, r.usage.completion_tokens);
  assert.ok(lp.length >= 1 && lp.length <= 8);
  for (const e of lp) {
    assert.equal(e.token_id, e.top_logprobs[0].token_id);
    assert.equal(e.logprob, e.top_logprobs[0].logprob);
    assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
    assert.ok(e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob);
  }
  const s = await collect(await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } }));
  assert.equal(s.content, r.choices[0].message.content);
  assert.deepEqual(s.logprobs, lp);
  assert.equal(s.usage.completion_tokens, r.usage.completion_tokens);
});

test('seeds reproduce; concurrent requests equal their solo runs', async () => {
  const base = { model: 'deepseek-v4', temperature: 1, max_tokens: 6, logprobs: true, ...noThink };
  const a = await client.chat.completions.create({ ...base, messages: user('seed test'), seed: 5 });
  const b = await client.chat.completions.create({ ...base, messages: user('seed test'), seed: 5 });
  assert.deepEqual(b.choices[0].logprobs, a.choices[0].logprobs);
  const bodies = Array.from({ length: 4 }, (_, i) => ({ ...base, messages: user(`request ${i} of four`), seed: 50 + i }));
  const solo = [];
  for (const x of bodies) solo.push(await client.chat.completions.create(x));
  const together = await Promise.all(bodies.map((x) => client.chat.completions.create(x)));
  for (let i = 0; i < bodies.length; i++) {
    assert.deepEqual(together[i].choices[0].logprobs, solo[i].choices[0].logprobs, `request ${i}`);
    assert.equal(together[i].choices[0].message.content, solo[i].choices[0].message.content);
  }
});

test('forced tokens are scored, and forced DSML becomes a tool call', async () => {
  const tools = [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } } } }];
  const dsml = '\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="lookup">\n<｜DSML｜ parameter name="q" string="true">tiny model</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>';
  const r = await client.chat.completions.create({ model: 'deepseek-v4', messages: user('look it up'), tools, forced_tokens: dsml, logprobs: true, ...noThink });
  const m = r.choices[0].message;
  assert.equal(m.tool_calls[0].function.name, 'lookup');
  assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { q: 'tiny model' });
  for (const e of r.choices[0].logprobs.content) assert.ok(e.logprob <= 0 && Number.isFinite(e.logprob));
});

test('a disconnect cancels the request in the engine', async () => {
  const ctrl = new AbortController();
  const stream = await client.chat.completions.create({ model: 'deepseek-v4', messages: user('go'), max_tokens: 1500, ignore_eos: true, stream: true, ...noThink }, { signal: ctrl.signal });
  let n = 0;
  try {
    for await (const _ of stream) if (++n === 3) ctrl.abort();
  } catch {
    // the client reports the abort as an error or as the end of the stream
  }
  assert.ok(await waitFor(async () => (await health(server.url)).running === 0, 5000));
});

test('history as clients send it: reasoning, arguments as an object, null or "", content parts and null', async () => {
  const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { x: { type: 'integer' } } } } },
                 { type: 'function', function: { name: 'g', parameters: { type: 'object', properties: {} } } }];
  const messages = [
    { role: 'user', content: [{ type: 'text', text: 'look it up' }] },
    { role: 'assistant', content: null, reasoning: 'I should call both.', tool_calls: [
      { id: 'c1', type: 'function', function: { name: 'f', arguments: { x: 3 } } },
      { id: 'c2', type: 'function', function: { name: 'g', arguments: null } },
      { id: 'c3', type: 'function', function: { name: 'g', arguments: '' } }] },
    { role: 'tool', tool_call_id: 'c1', content: '9' },
    { role: 'tool', tool_call_id: 'c2', content: [{ type: 'text', text: 'done' }] },
    { role: 'tool', tool_call_id: 'c3', content: 'done' },
  ];
  const r = await client.chat.completions.create({ model: 'deepseek-v4', messages, tools, max_tokens: 4, temperature: 0, ...noThink });
  assert.equal(r.choices.length, 1);
  assert.ok(r.usage.prompt_tokens > 20);
  // The same history with arguments as strings renders the same prompt.
  const asStrings = structuredClone(messages);
  asStrings[1].tool_calls[0].function.arguments = '{"x": 3}';
  asStrings[1].tool_calls[1].function.arguments = '{}';
  asStrings[1].reasoning_content = asStrings[1].reasoning;
  delete asStrings[1].reasoning;
  const s = await client.chat.completions.create({ model: 'deepseek-v4', messages: asStrings, tools, max_tokens: 4, temperature: 0, ...noThink });
  assert.equal(s.usage.prompt_tokens, r.usage.prompt_tokens);
  assert.equal(s.choices[0].message.content, r.choices[0].message.content);
  // What the encoding cannot hold is refused naming the message and field.
  await assert.rejects(
    client.chat.completions.create({ model: 'deepseek-v4', messages: [{ role: 'user', content: 'a', tool_calls: [{ id: 'x', type: 'function', function: { name: 'f', arguments: '{}' } }] }] }),
    (e) => e.status === 400 && /messages\[0\]\.tool_calls/.test(e.message));
});
