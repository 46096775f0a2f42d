// The real lane core behind the HTTP layer: `dsv4 serve --lanes-fake-backend` runs LaneHost (rounds,
// drafts, keyed sampler, cancel, halt) over the lane core's hash backend (logits from a hash of the
// fed history, no weights) with the real V4.1 tokenizer, chat encoder, detokenizer and DSML parser.
// Checks that hold for any engine: streamed == whole, seeds reproduce, drafted == undrafted,
// parallel == solo, stop strings cut where the text says, forced DSML becomes tool calls.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './harness.mjs';

let server;
let client;
before(async () => {
  server = await startServer(['--lanes-fake-backend', '--fake-context', '8192'], { fake: false });
  client = server.client();
});
after(async () => server.stop());

const user = (content) => [{ role: 'user', content }];

async function collect(stream) {
  const out = { content: '', reasoning: '', finish: null, usage: null, logprobs: [] };
  for await (const chunk of stream) {
    if (chunk.usage) out.usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    out.content += c.delta?.content ?? c.text ?? '';
    out.reasoning += c.delta?.reasoning_content ?? '';
    if (c.logprobs?.content) out.logprobs.push(...c.logprobs.content);
    if (c.finish_reason) out.finish = c.finish_reason;
  }
  return out;
}

test('models and a greedy chat reply of exactly max_tokens tokens', async () => {
  const models = await client.models.list();
  assert.equal(models.data[0].max_model_len, 8192);
  const r = await client.chat.completions.create({ model: 'deepseek-v4', messages: user('Hello'), temperature: 0, max_tokens: 12, chat_template_kwargs: { thinking: false } });
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.ok(r.usage.prompt_tokens > 3);
});

test('streamed equals whole, logprobs included', async () => {
  const body = { model: 'deepseek-v4', messages: user('Tell me a story'), temperature: 1, top_k: 50, seed: 11, max_tokens: 24, logprobs: true, top_logprobs: 3, chat_template_kwargs: { thinking: false } };
  const whole = await client.chat.completions.create(body);
  const s = await collect(await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } }));
  assert.equal(s.content, whole.choices[0].message.content);
  assert.deepEqual(s.logprobs, whole.choices[0].logprobs.content);
  assert.equal(whole.choices[0].logprobs.content.length, 24);
  for (const e of whole.choices[0].logprobs.content) {
    assert.equal(e.top_logprobs.length, 3);
    assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[2].logprob);
    assert.ok(e.logprob <= e.top_logprobs[0].logprob + 1e-6);
  }
  assert.equal(s.usage.completion_tokens, whole.usage.completion_tokens);
});

test('seeds reproduce, other seeds differ; drafted equals undrafted; parallel equals solo', async () => {
  const base = { model: 'deepseek-v4', temperature: 0.9, top_k: 50, max_tokens: 16, logprobs: true, chat_template_kwargs: { thinking: false } };
  const a = await client.chat.completions.create({ ...base, messages: user('seeded'), seed: 3 });
  const b = await client.chat.completions.create({ ...base, messages: user('seeded'), seed: 3 });
  const c = await client.chat.completions.create({ ...base, messages: user('seeded'), seed: 4 });
  assert.deepEqual(b.choices[0].logprobs, a.choices[0].logprobs);
  assert.notDeepEqual(c.choices[0].logprobs, a.choices[0].logprobs);
  const bodies = Array.from({ length: 6 }, (_, i) => ({ ...base, messages: user(`parallel ${i}`), seed: 100 + i }));
  const solo = [];
  for (const x of bodies) solo.push(await client.chat.completions.create(x));
  const together = await Promise.all(bodies.map((x) => client.chat.completions.create(x)));
  const serial = await Promise.all(bodies.map((x) => client.chat.completions.create({ ...x, draft: false })));
  for (let i = 0; i < bodies.length; i++) {
    assert.deepEqual(together[i].choices[0].logprobs, solo[i].choices[0].logprobs);
    assert.deepEqual(serial[i].choices[0].logprobs, solo[i].choices[0].logprobs);
    assert.equal(serial[i].choices[0].message.content, solo[i].choices[0].message.content);
  }
});

test('stop strings cut the completion where the text first contains them', async () => {
  const body = { model: 'deepseek-v4', prompt: 'Once upon a time', temperature: 0, max_tokens: 40 };
  const full = (await client.completions.create(body)).choices[0].text;
  // A stop string taken from the middle of the greedy text (JS finds where it first occurs).
  const cps = Array.from(full); // code points, so the stop string is whole characters
  const mid = Math.floor(cps.length / 2);
  const stop = cps.slice(mid, mid + 3).join('');
  assert.ok(cps.length > 10 && stop.length > 0);
  const cut = await client.completions.create({ ...body, stop: [stop] });
  assert.equal(cut.choices[0].text, full.slice(0, full.indexOf(stop)));
  assert.equal(cut.choices[0].finish_reason, 'stop');
});

test('a forced DSML continuation comes back as a tool call; forced reasoning as reasoning_content', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
  const dsml = '\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="get_weather">\n<｜DSML｜ parameter name="city" string="true">Paris</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>';
  const r = await client.chat.completions.create({ model: 'deepseek-v4', messages: user('Weather in Paris?'), tools, forced_tokens: dsml, chat_template_kwargs: { thinking: false } });
  const m = r.choices[0].message;
  assert.equal(m.tool_calls.length, 1);
  assert.equal(m.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { city: 'Paris' });
  // The round trip renders the call and its result back into the prompt.
  const r2 = await client.chat.completions.create({
    model: 'deepseek-v4', tools, max_tokens: 4, chat_template_kwargs: { thinking: false },
    messages: [...user('Weather in Paris?'), { role: 'assistant', content: '', tool_calls: m.tool_calls }, { role: 'tool', tool_call_id: m.tool_calls[0].id, content: '18C' }],
  });
  assert.ok(r2.usage.prompt_tokens > r.usage.prompt_tokens);
  const t = await client.chat.completions.create({ model: 'deepseek-v4', messages: user('Think first'), forced_tokens: 'Let me see.</think>Yes.', chat_template_kwargs: { thinking: true } });
  assert.equal(t.choices[0].message.reasoning_content, 'Let me see.');
  assert.equal(t.choices[0].message.content, 'Yes.');
});

test('a disconnect cancels in the lane core', async () => {
  const ctrl = new AbortController();
  const p = client.chat.completions.create({ model: 'deepseek-v4', messages: user('long'), max_tokens: 4000, ignore_eos: true, stream: true }, { signal: ctrl.signal });
  const stream = await p;
  let n = 0;
  try {
    for await (const _ of stream) if (++n === 3) ctrl.abort();
  } catch {
    // the client reports the abort as an error or as the end of the stream
  }
  assert.ok(n >= 3);
  const deadline = Date.now() + 3000;
  let h;
  do {
    h = JSON.parse(await (await fetch(`${server.url}/health`)).text());
  } while (h.running !== 0 && Date.now() < deadline);
  assert.equal(h.running, 0);
});
