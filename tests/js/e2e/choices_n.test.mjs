// n choices and best_of on the embedded model (tiny synthetic V4.1 weights behind the lane core),
// through the official `openai` npm client: choice i of a request with seed s equals, token for
// token and logprob for logprob, a solo request with seed d(s, i) (d(s, 0) = s, d(s, i) =
// splitmix64_nth(s, i), computed here independently with BigInt); usage counts the prompt once and
// sums the choices; best_of returns the candidate with the highest summed logprob; streaming with
// best_of > n and n beyond the limit are refused while the server keeps serving.
//
// d(s, i) is a 64-bit integer, beyond what a JavaScript number holds exactly (2^53): the solo
// requests carry it as a JSON integer literal written from the BigInt, sent raw.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, request, parseSse } from './harness.mjs';

let server;
let client;
before(async () => {
  server = await startServer(['--context', '512', '--parallel', '4'], { fake: false, readyTimeoutMs: 240000 });
  client = server.client({ timeout: 120000 });
});
after(async () => server.stop());

// SplitMix64 (Vigna's splitmix64.c): the i-th output from state s is mix(s + i * gamma) mod 2^64.
const M64 = (1n << 64n) - 1n;
function splitmix64Nth(s, i) {
  let z = (s + i * 0x9e3779b97f4a7c15n) & M64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M64;
  return z ^ (z >> 31n);
}
const derived = (s, i) => (i === 0 ? s : splitmix64Nth(s, BigInt(i)));

// The published SplitMix64 sequence from state 1234567 (splitmix64.c, as in the Java SplittableRandom
// docs' test vectors): the derivation above reproduces it.
test('the seed derivation is SplitMix64', () => {
  assert.equal(splitmix64Nth(1234567n, 1n), 6457827717110365317n);
  assert.equal(splitmix64Nth(1234567n, 2n), 3203168211198807973n);
});

const SEED = 20250611n;
const COMPLETION = { model: 'deepseek-v4', prompt: 'Once upon a time', max_tokens: 12, temperature: 0.8, logprobs: 1 };
const CHAT = { model: 'deepseek-v4', messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 12, temperature: 0.8, logprobs: true, top_logprobs: 1 };

// A raw request whose seed is the exact 64-bit value.
async function solo(path, body, seed) {
  const text = JSON.stringify({ ...body, seed: '@SEED@' }).replace('"@SEED@"', seed.toString());
  const r = await request(server.url, { path, body: text, timeoutMs: 120000 });
  assert.equal(r.status, 200, r.body);
  return JSON.parse(r.body);
}

const sum = (xs) => xs.reduce((a, b) => a + b, 0);

let completionN; // the non-streamed n = 3 completion, reused by best_of
test('completions n=3: choice i equals the solo request with seed d(s, i); usage sums', async () => {
  const r = await client.completions.create({ ...COMPLETION, n: 3, seed: Number(SEED) });
  completionN = r;
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  let completion = 0;
  for (let i = 0; i < 3; i++) {
    const one = await solo('/v1/completions', COMPLETION, derived(SEED, i));
    const c = one.choices[0];
    assert.equal(r.choices[i].text, c.text, `choice ${i}`);
    assert.equal(r.choices[i].finish_reason, c.finish_reason, `choice ${i}`);
    assert.deepEqual(r.choices[i].logprobs, c.logprobs, `choice ${i}`);
    assert.equal(r.usage.prompt_tokens, one.usage.prompt_tokens);
    completion += one.usage.completion_tokens;
  }
  assert.equal(r.usage.completion_tokens, completion);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + completion);
  // Different seeds: the choices are not all the same text.
  assert.ok(new Set(r.choices.map((c) => c.logprobs.token_ids.join(','))).size > 1);
});

test('completions n=3 streamed equals not streamed; one usage chunk, one [DONE]', async () => {
  const body = JSON.stringify({ ...COMPLETION, n: 3, seed: '@S@', stream: true, stream_options: { include_usage: true } }).replace('"@S@"', SEED.toString());
  const r = await request(server.url, { path: '/v1/completions', body, timeoutMs: 120000 });
  assert.equal(r.status, 200, r.body);
  assert.equal(r.body.split('data: [DONE]').length - 1, 1);
  const sse = parseSse(r.body);
  const text = ['', '', ''];
  const ids = [[], [], []];
  const lps = [[], [], []];
  const finish = [[], [], []];
  const usages = [];
  for (const chunk of sse.data) {
    if (chunk.usage) usages.push(chunk.usage);
    for (const c of chunk.choices) {
      text[c.index] += c.text;
      if (c.logprobs) {
        ids[c.index].push(...c.logprobs.token_ids);
        lps[c.index].push(...c.logprobs.token_logprobs);
      }
      if (c.finish_reason) finish[c.index].push(c.finish_reason);
    }
  }
  for (let i = 0; i < 3; i++) {
    const whole = completionN.choices[i];
    assert.equal(text[i], whole.text, `choice ${i}`);
    assert.deepEqual(ids[i], whole.logprobs.token_ids, `choice ${i}`);
    assert.deepEqual(lps[i], whole.logprobs.token_logprobs, `choice ${i}`);
    assert.deepEqual(finish[i], [whole.finish_reason], `choice ${i}`);
  }
  assert.equal(usages.length, 1);
  assert.equal(usages[0].completion_tokens, completionN.usage.completion_tokens);
  assert.equal(usages[0].prompt_tokens, completionN.usage.prompt_tokens);
  // The usage chunk comes last, after every choice's finish.
  assert.ok(sse.data[sse.data.length - 1].usage);
});

test('chat n=3 through the client, streamed and not: choice i equals the solo request', async () => {
  const r = await client.chat.completions.create({ ...CHAT, n: 3, seed: Number(SEED) });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  const stream = await client.chat.completions.create({ ...CHAT, n: 3, seed: Number(SEED), stream: true, stream_options: { include_usage: true } });
  const content = ['', '', ''];
  const lps = [[], [], []];
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta?.content) content[c.index] += c.delta.content;
      if (c.logprobs?.content) lps[c.index].push(...c.logprobs.content);
    }
  }
  let completion = 0;
  for (let i = 0; i < 3; i++) {
    const one = await solo('/v1/chat/completions', CHAT, derived(SEED, i));
    const c = one.choices[0];
    assert.equal(r.choices[i].message.content, c.message.content, `choice ${i}`);
    assert.deepEqual(r.choices[i].logprobs, c.logprobs, `choice ${i}`);
    assert.equal(r.choices[i].finish_reason, c.finish_reason, `choice ${i}`);
    assert.equal(content[i], c.message.content ?? '', `streamed choice ${i}`);
    assert.deepEqual(lps[i], c.logprobs.content, `streamed choice ${i}`);
    completion += one.usage.completion_tokens;
    assert.equal(r.usage.prompt_tokens, one.usage.prompt_tokens);
  }
  assert.equal(r.usage.completion_tokens, completion);
  assert.equal(usage.completion_tokens, completion);
});

test('best_of=3, n=1 returns the candidate with the highest summed logprob, billed for all three', async () => {
  const { logprobs, ...noLogprobs } = COMPLETION;
  const r = await client.completions.create({ ...noLogprobs, n: 1, best_of: 3, seed: Number(SEED) });
  // The three candidates are the n=3 choices of the same seed; the highest sum wins, ties to the
  // lower index.
  const scores = completionN.choices.map((c) => sum(c.logprobs.token_logprobs));
  let best = 0;
  for (let i = 1; i < 3; i++) if (scores[i] > scores[best]) best = i;
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].index, 0);
  assert.equal(r.choices[0].text, completionN.choices[best].text);
  assert.equal(r.choices[0].finish_reason, completionN.choices[best].finish_reason);
  assert.equal(r.choices[0].logprobs, null); // not asked for: used for ranking only
  assert.equal(r.usage.completion_tokens, completionN.usage.completion_tokens);
  assert.equal(r.usage.prompt_tokens, completionN.usage.prompt_tokens);
});

test('greedy choices are identical', async () => {
  const r = await client.completions.create({ ...COMPLETION, temperature: 0, n: 2, seed: Number(SEED) });
  assert.equal(r.choices[0].text, r.choices[1].text);
  assert.deepEqual(r.choices[0].logprobs, r.choices[1].logprobs);
});

test('refusals name the field; the server keeps serving', async () => {
  await assert.rejects(client.completions.create({ ...COMPLETION, n: 1, best_of: 3, stream: true }), (e) => e.status === 400 && e.error.param === 'best_of');
  await assert.rejects(client.completions.create({ ...COMPLETION, n: 17 }), (e) => e.status === 400 && e.error.param === 'n');
  await assert.rejects(client.completions.create({ ...COMPLETION, n: 3, best_of: 2 }), (e) => e.status === 400 && e.error.param === 'best_of');
  await assert.rejects(client.chat.completions.create({ ...CHAT, n: 17 }), (e) => e.status === 400 && e.error.param === 'n');
  // More candidates than the engine runs side by side (--parallel 4): refused, naming the field.
  await assert.rejects(client.completions.create({ ...COMPLETION, n: 5 }), (e) => e.status === 400 && e.error.param === 'n');
  const ok = await client.completions.create({ ...COMPLETION, n: 2, seed: 1 });
  assert.equal(ok.choices.length, 2);
});
