// Serving on a real model (the embedded tiny V4.1 weights on the CPU oracle behind the lane core)
// through the official `openai` client: /metrics as Prometheus text with counters that follow the
// requests, SSE keepalives while a prompt fills, queue-full refusal, stop strings cut exactly
// (across tokens, streamed and not), forced tool calls, request fields, cached prompt tokens,
// --api-key and the limits. Expected values come from the requests themselves (usage the client
// received, text the client saw, JavaScript string search) and from API invariants, never from a
// second reading of the server's own counters.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import OpenAI from 'openai';
import { spawn } from 'node:child_process';
import { startServer, request, parseSse, waitFor, BIN, clientAgent } from './harness.mjs';
import { parsePrometheus, sample } from './prometheus.mjs';
import fs from 'node:fs';
import zlib from 'node:zlib';
import { Tokenizer } from '@huggingface/tokenizers';

let tok;
const tokenizer = () => {
  tok ??= new Tokenizer(JSON.parse(zlib.gunzipSync(fs.readFileSync(new URL('../../../src/tokenizer/data/deepseek_v41_tokenizer.json.gz', import.meta.url))).toString('utf8')), { clean_up_tokenization_spaces: false });
  return tok;
};

const KEY = 'k-serving-test';
const MODEL = 'deepseek-v4';
const auth = { authorization: `Bearer ${KEY}` };
const user = (content) => [{ role: 'user', content }];
const noThink = { chat_template_kwargs: { thinking: false } };
// A system prompt of some hundred tokens: long enough to fill for a while and to be cached.
const longSystem = 'You are a careful assistant. Answer briefly, cite nothing, and keep to the point. '.repeat(8);

let server;
let client;
before(async () => {
  server = await startServer([
    '--context', '2048', '--parallel', '4', '--api-key', KEY, '--max-body-bytes', '100000',
    '--max-prompt-tokens', '1500', '--max-tokens', '256', '--sse-keepalive-seconds', '0.05',
    '--prompt-cache-page', '32',
  ], { fake: false, readyTimeoutMs: 240000 });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0, httpAgent: clientAgent });
});
after(async () => server.stop());

async function metrics(url = server.url) {
  const r = await request(url, { method: 'GET', path: '/metrics' });
  assert.equal(r.status, 200);
  assert.match(r.headers['content-type'], /^text\/plain; version=0\.0\.4/);
  return parsePrometheus(r.body);
}

async function collect(stream) {
  const out = { content: '', reasoning: '', text: '', calls: [], finish: null, usage: null };
  for await (const chunk of stream) {
    if (chunk.usage) out.usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    out.content += c.delta?.content ?? '';
    out.reasoning += c.delta?.reasoning_content ?? '';
    out.text += c.text ?? '';
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

// A raw streaming POST whose bytes can be watched while it runs.
function openStream(url, body, path = '/v1/chat/completions') {
  let text = '';
  let req;
  const u = new URL(path, url);
  const ended = new Promise((resolve, reject) => {
    req = http.request({ method: 'POST', hostname: u.hostname, port: u.port, path: u.pathname, headers: { 'content-type': 'application/json', ...auth }, agent: false }, (res) => {
      res.on('data', (c) => (text += c.toString()));
      res.on('end', () => resolve(text));
      res.on('error', () => resolve(text));
    });
    req.on('error', () => resolve(text));
    req.end(JSON.stringify({ model: MODEL, stream: true, ...body }));
  });
  return { ended, text: () => text, abort: () => req.destroy() };
}

test('/metrics is Prometheus text whose counters follow the requests', async () => {
  const m0 = await metrics();
  const bodies = [
    { messages: user('first'), max_tokens: 5, ignore_eos: true, ...noThink },
    { messages: user('second one'), max_tokens: 7, ignore_eos: true, ...noThink },
    { messages: user('third'), max_tokens: 4, ignore_eos: true, ...noThink, draft: false },
  ];
  const replies = await Promise.all(bodies.map((b) => client.chat.completions.create({ model: MODEL, ...b })));
  const prompt = replies.reduce((a, r) => a + r.usage.prompt_tokens, 0);
  const generated = replies.reduce((a, r) => a + r.usage.completion_tokens, 0);
  assert.equal(generated, 16);
  // The HTTP counter is bumped after the reply is written: wait for it.
  const ok = { endpoint: '/v1/chat/completions', status: '200' };
  let m1;
  assert.ok(await waitFor(async () => {
    m1 = await metrics();
    return sample(m1, 'dsv4:http_requests_total', ok) === sample(m0, 'dsv4:http_requests_total', ok) + 3;
  }, 5000));
  const d = (name, labels) => sample(m1, name, labels) - sample(m0, name, labels);
  assert.equal(d('dsv4:prompt_tokens_total'), prompt);
  assert.equal(d('dsv4:generation_tokens_total'), generated);
  assert.equal(d('dsv4:request_success_total', { finished_reason: 'length' }), 3);
  assert.equal(d('dsv4:time_to_first_token_seconds_count'), 3);
  assert.equal(d('dsv4:e2e_request_latency_seconds_count'), 3);
  assert.equal(d('dsv4:request_prompt_tokens_sum'), prompt);
  assert.equal(d('dsv4:request_generation_tokens_sum'), generated);
  // Inter-token gaps: one per token after each request's first delivery (several tokens may
  // arrive together, so at most generated - 3 and at least one).
  const gaps = d('dsv4:inter_token_latency_seconds_count');
  assert.ok(gaps >= 1 && gaps <= generated - 3, `${gaps} gaps`);
  assert.ok(d('dsv4:inter_token_latency_seconds_sum') > 0);
  assert.ok(d('dsv4:engine_rounds_total') >= 4);
  // Drafts (the tiny model carries the DSpark head): accepted never exceed drafted.
  assert.ok(sample(m1, 'dsv4:spec_decode_num_accepted_tokens_total') <= sample(m1, 'dsv4:spec_decode_num_draft_tokens_total'));
  assert.equal(sample(m1, 'dsv4:server_state'), 1);
  for (const g of ['dsv4:num_requests_running', 'dsv4:num_requests_waiting', 'dsv4:num_requests_in_progress', 'dsv4:num_streams_open'])
    assert.equal(m1.families.get(g).type, 'gauge', g);
});

test('drafts move the spec-decode counters; draft:false moves none and gives the same tokens', async () => {
  const body = { model: MODEL, messages: user('draft me'), max_tokens: 12, ignore_eos: true, temperature: 0, logprobs: true, ...noThink };
  const m0 = await metrics();
  const off = await client.chat.completions.create({ ...body, draft: false });
  const m1 = await metrics();
  const on = await client.chat.completions.create(body);
  const m2 = await metrics();
  const drafted = (a, b) => sample(b, 'dsv4:spec_decode_num_draft_tokens_total') - sample(a, 'dsv4:spec_decode_num_draft_tokens_total');
  const accepted = (a, b) => sample(b, 'dsv4:spec_decode_num_accepted_tokens_total') - sample(a, 'dsv4:spec_decode_num_accepted_tokens_total');
  assert.equal(drafted(m0, m1), 0);
  assert.ok(drafted(m1, m2) > 0);
  assert.ok(accepted(m1, m2) >= 0 && accepted(m1, m2) <= drafted(m1, m2));
  assert.deepEqual(on.choices[0].logprobs.content.map((e) => e.token_id), off.choices[0].logprobs.content.map((e) => e.token_id));
});

test('the same prompt twice: cached tokens in usage, prompt-cache hits and bytes in /metrics', async () => {
  const body = { model: MODEL, messages: [{ role: 'system', content: longSystem }, ...user('cache me')], max_tokens: 4, seed: 11, logprobs: true, ...noThink };
  const m0 = await metrics();
  const first = await client.chat.completions.create(body);
  const second = await client.chat.completions.create(body);
  const m1 = await metrics();
  assert.equal(first.usage.prompt_tokens_details.cached_tokens, 0);
  const cached = second.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached > 0 && cached < second.usage.prompt_tokens, `${cached} cached`);
  assert.equal(cached % 32, 0); // prefixes are cached at page boundaries (--prompt-cache-page 32)
  assert.equal(sample(m1, 'dsv4:prefix_cache_hits_total') - sample(m0, 'dsv4:prefix_cache_hits_total'), 1);
  assert.equal(sample(m1, 'dsv4:prefix_cache_queries_total') - sample(m0, 'dsv4:prefix_cache_queries_total'), 2);
  assert.ok(await waitFor(async () => sample(await metrics(), 'dsv4:prompt_tokens_cached_total') - sample(m0, 'dsv4:prompt_tokens_cached_total') === cached, 5000));
  assert.ok(sample(m1, 'dsv4:prompt_cache_bytes') > 0);
  // Resumed equals fresh: the same seed gives the same reply.
  assert.deepEqual(second.choices[0].logprobs, first.choices[0].logprobs);
});

test('SSE keepalive comments arrive before the first token while a long prompt fills', async () => {
  const long = 'Please read all of this carefully before you answer the question at the end. '.repeat(40);
  const st = openStream(server.url, { messages: user(long + ' Ready?'), max_tokens: 2, ...noThink });
  const sse = parseSse(await st.ended);
  assert.ok(sse.commentsBeforeData >= 2, `${sse.commentsBeforeData} keepalives before the first chunk`);
  assert.match(st.text(), /^(: keepalive\n\n)+data: /);
  assert.ok(sse.done);
});

// Greedy completion text and its tokens (completions logprobs: token strings and ids).
async function greedy(prompt, n) {
  const r = await client.completions.create({ model: MODEL, prompt, max_tokens: n, temperature: 0, ignore_eos: true, logprobs: 1 });
  return { text: r.choices[0].text, tokens: r.choices[0].logprobs.tokens };
}

// A stop string that spans the boundary between two tokens and first occurs there.
function spanningStop(text, tokens) {
  let at = 0;
  const plain = (s) => s.length > 0 && !/[\uFFFD\uD800-\uDFFF]/.test(s);
  for (let k = 0; k + 1 < tokens.length; k++) {
    at += tokens[k].length;
    if (!text.startsWith(tokens.slice(0, k + 2).join(''))) break;
    if (!plain(tokens[k]) || !plain(tokens[k + 1])) continue;
    const a = Math.min(2, tokens[k].length);
    const b = Math.min(2, tokens[k + 1].length);
    const stop = tokens[k].slice(-a) + tokens[k + 1].slice(0, b);
    if (text.indexOf(stop) === at - a) return { stop, cut: at - a };
  }
  return null;
}

test('stop strings cut exactly, across tokens, streamed and not, chat and completions', async () => {
  const prompt = 'The list of things to remember:';
  const full = await greedy(prompt, 24);
  const found = spanningStop(full.text, full.tokens);
  assert.ok(found, `no token boundary to span in ${JSON.stringify(full.tokens)}`);
  const expected = full.text.slice(0, found.cut);
  const body = { model: MODEL, prompt, max_tokens: 24, temperature: 0, ignore_eos: true, stop: ['\u0001never', found.stop] };
  const [whole, streamed] = await Promise.all([
    client.completions.create(body),
    client.completions.create({ ...body, stream: true }).then(collect),
  ]);
  assert.equal(whole.choices[0].text, expected);
  assert.equal(whole.choices[0].finish_reason, 'stop');
  assert.equal(streamed.text, expected);
  assert.equal(streamed.finish, 'stop');
  assert.ok(!whole.choices[0].text.includes(found.stop));

  // Chat: the same rule on the reply text.
  const chatBody = { model: MODEL, messages: user('Say something.'), max_tokens: 20, temperature: 0, ignore_eos: true, ...noThink };
  const chatFull = (await client.chat.completions.create(chatBody)).choices[0].message.content;
  const cps = Array.from(chatFull).filter((c) => c !== '\uFFFD');
  const stop = cps.slice(6, 9).join('');
  assert.ok(stop.length > 0 && chatFull.includes(stop));
  const chatExpected = chatFull.slice(0, chatFull.indexOf(stop));
  const [cw, cs] = await Promise.all([
    client.chat.completions.create({ ...chatBody, stop }),
    client.chat.completions.create({ ...chatBody, stop, stream: true }).then(collect),
  ]);
  assert.equal(cw.choices[0].message.content, chatExpected);
  assert.equal(cw.choices[0].finish_reason, 'stop');
  assert.equal(cs.content, chatExpected);
  assert.equal(cs.finish, 'stop');
});

test('a forced tool call (required with one tool, or named) ends with finish_reason tool_calls', async () => {
  // The call block is held to the tools' grammar: a bounded argument and one call per block let random weights
  // close it within max_tokens.
  const tool = (name) => ({ type: 'function', function: { name, parameters: { type: 'object', properties: { q: { type: 'string', maxLength: 4 } } } } });
  const base = { model: MODEL, messages: user('What is the weather in Paris?'), max_tokens: 160, parallel_tool_calls: false };
  const required = await client.chat.completions.create({ ...base, tools: [tool('weather')], tool_choice: 'required' });
  const named = await client.chat.completions.create({ ...base, tools: [tool('weather'), tool('news')], tool_choice: { type: 'function', function: { name: 'news' } }, ...noThink });
  const streamed = await collect(await client.chat.completions.create({ ...base, tools: [tool('weather'), tool('news')], tool_choice: { type: 'function', function: { name: 'weather' } }, stream: true }));
  for (const [r, name] of [[required, 'weather'], [named, 'news']]) {
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.tool_calls.length, 1);
    assert.equal(c.message.tool_calls[0].type, 'function');
    assert.equal(c.message.tool_calls[0].function.name, name);
    assert.equal(typeof JSON.parse(c.message.tool_calls[0].function.arguments), 'object');
    assert.ok(!c.message.content);
  }
  assert.equal(streamed.finish, 'tool_calls');
  assert.equal(streamed.calls[0].name, 'weather');
  assert.match(streamed.calls[0].id, /^call_/);
  assert.equal(typeof JSON.parse(streamed.calls[0].arguments), 'object');
  assert.equal(streamed.content, '');
});

test('request fields: n, logprobs and top_logprobs up to 20 in both shapes, max_completion_tokens, min_p', async () => {
  const n17 = await request(server.url, { headers: auth, body: { model: MODEL, messages: user('x'), n: 17 } });
  assert.equal(n17.status, 400);
  assert.equal(JSON.parse(n17.body).error.param, 'n');

  const chat = await client.chat.completions.create({ model: MODEL, messages: user('x'), max_completion_tokens: 3, ignore_eos: true, logprobs: true, top_logprobs: 20, ...noThink });
  assert.equal(chat.usage.completion_tokens, 3);
  for (const e of chat.choices[0].logprobs.content) {
    assert.equal(e.top_logprobs.length, 20);
    assert.ok(Number.isInteger(e.token_id));
    for (const t of e.top_logprobs) assert.ok(Number.isInteger(t.token_id));
    for (let i = 1; i < 20; i++) assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob);
  }
  const comp = await client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 2, ignore_eos: true, logprobs: 20 });
  const lp = comp.choices[0].logprobs;
  assert.equal(lp.token_ids.length, 2);
  for (const alt of lp.top_logprobs) assert.equal(Object.keys(alt).length <= 20 && Object.keys(alt).length >= 19, true);
  for (const [body, param] of [
    [{ model: MODEL, messages: user('x'), logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
    [{ model: MODEL, prompt: 'x', logprobs: 21 }, 'logprobs'],
  ]) {
    const r = await request(server.url, { headers: auth, path: body.prompt ? '/v1/completions' : '/v1/chat/completions', body });
    assert.equal(r.status, 400);
    assert.equal(JSON.parse(r.body).error.param, param);
  }

  // min_p m: every drawn token has p >= m * p(top-1), i.e. logprob >= top-1 logprob + ln m.
  const mp = await client.chat.completions.create({ model: MODEL, messages: user('sample'), max_tokens: 8, ignore_eos: true, temperature: 1, min_p: 0.5, seed: 7, logprobs: true, top_logprobs: 1, ...noThink });
  for (const e of mp.choices[0].logprobs.content) assert.ok(e.logprob >= e.top_logprobs[0].logprob + Math.log(0.5) - 1e-5);
});

test('thinking switches: chat_template_kwargs.thinking / enable_thinking, reasoning_effort', async () => {
  const ask = (extra) => client.chat.completions.create({ model: MODEL, messages: user('hi'), max_tokens: 3, ignore_eos: true, ...extra });
  const on = await ask({ chat_template_kwargs: { thinking: true } });
  const enabled = await ask({ chat_template_kwargs: { enable_thinking: true } });
  const off = await ask({ chat_template_kwargs: { enable_thinking: false } });
  const none = await ask({ reasoning_effort: 'none' });
  const max = await ask({ reasoning_effort: 'max' });
  for (const r of [on, enabled]) assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 3);
  for (const r of [off, none]) {
    assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 0);
    assert.ok(!r.choices[0].message.reasoning_content);
  }
  // Thinking is on by default: effort max reasons. Its prompt is the V4.1 golden shape
  // (tokenizer-and-chat.md §2.3) with effort 100, counted by @huggingface/tokenizers, and differs
  // from effort high's (75): the same forced continuation scores differently after each.
  assert.equal(max.usage.completion_tokens_details.reasoning_tokens, 3);
  const golden = (n) => `<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: ${n} (range 1-100, the higher the value, the more thorough the reasoning)\n\n<｜User｜>hi<｜Assistant｜><think>`;
  assert.equal(max.usage.prompt_tokens, tokenizer().encode(golden(100), { add_special_tokens: false }).ids.length);
  const score = (effort) => client.chat.completions.create({ model: MODEL, messages: user('hi'), reasoning_effort: effort, forced_tokens: 'Let me see.' }).then((r) => r.choices[0].logprobs.content.map((e) => e.logprob));
  const [sMax, sHigh, sMax2] = await Promise.all([score('max'), score('high'), score('max')]);
  assert.deepEqual(sMax2, sMax);
  assert.notDeepEqual(sHigh, sMax);
  const bad = await request(server.url, { headers: auth, body: { model: MODEL, messages: user('x'), reasoning_effort: 'extreme' } });
  assert.equal(bad.status, 400);
  assert.equal(JSON.parse(bad.body).error.param, 'reasoning_effort');
});

test('--api-key and the limits: body size, prompt length, max tokens', async () => {
  const none = await request(server.url, { body: { model: MODEL, messages: user('x') } });
  assert.equal(none.status, 401);
  assert.equal(JSON.parse(none.body).error.code, 'invalid_api_key');
  assert.equal((await request(server.url, { method: 'GET', path: '/health' })).status, 200);
  const big = await request(server.url, { headers: auth, body: { model: MODEL, messages: user('x'.repeat(120000)) } });
  assert.equal(big.status, 413);
  assert.equal(JSON.parse(big.body).error.code, 'request_too_large');
  const longPrompt = await request(server.url, { headers: auth, body: { model: MODEL, messages: user('word '.repeat(1600)) } });
  assert.equal(longPrompt.status, 400);
  assert.equal(JSON.parse(longPrompt.body).error.code, 'context_length_exceeded');
  const tooMany = await request(server.url, { headers: auth, body: { model: MODEL, messages: user('x'), max_tokens: 257 } });
  assert.equal(tooMany.status, 400);
  assert.equal(JSON.parse(tooMany.body).error.param, 'max_tokens');
});

test('dsv4 chat holds a conversation with the model', async () => {
  const input = 'Hello there\nAnd again\n/reset\nHello there\n/quit\n';
  const r = await new Promise((resolve) => {
    const p = spawn(BIN, ['chat', '--url', server.url, '--api-key', KEY, '--max-tokens', '4', '--usage'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    p.on('exit', (status) => resolve({ status, stdout, stderr }));
    p.stdin.end(input);
  });
  assert.equal(r.status, 0, r.stderr);
  const usage = [...r.stderr.matchAll(/\[(\d+) prompt tokens \((\d+) cached\), (\d+) completion tokens\]/g)];
  assert.equal(usage.length, 3, r.stderr);
  for (const u of usage) assert.ok(Number(u[3]) >= 1 && Number(u[3]) <= 4);
  // The second turn's prompt carries the first exchange; /reset starts over (the same prompt as
  // the first turn).
  assert.ok(Number(usage[1][1]) > Number(usage[0][1]));
  assert.equal(usage[2][1], usage[0][1]);
});

test('a full queue refuses with 429, Retry-After and an OpenAI error; waiting and running gauges show the queue', async () => {
  const s = await startServer(['--context', '1024', '--parallel', '1', '--max-queue', '2'], { fake: false, readyTimeoutMs: 240000 });
  const streams = [];
  try {
    const body = { messages: user('go on'), max_tokens: 200, ignore_eos: true, ...noThink };
    for (let i = 0; i < 2; i++) streams.push(openStream(s.url, body));
    // One stream decodes (one slot), the other waits in the engine's queue; the gauges are read
    // between rounds, so poll until they settle there.
    let m;
    const gauges = () => ['in_progress', 'streams_open', 'running', 'waiting'].map((g) => sample(m, `dsv4:num_${g === 'streams_open' ? 'streams_open' : `requests_${g}`}`));
    const settled = await waitFor(async () => {
      m = parsePrometheus((await request(s.url, { method: 'GET', path: '/metrics' })).body);
      return JSON.stringify(gauges()) === JSON.stringify([2, 2, 1, 1]);
    }, 20000);
    assert.ok(settled, `in progress, streams open, running, waiting: ${gauges()}`);
    // Counters move while requests run: generated tokens grow before either stream has ended.
    const generated = async () => sample(parsePrometheus((await request(s.url, { method: 'GET', path: '/metrics' })).body), 'dsv4:generation_tokens_total');
    // The first token follows the step that finishes the prompt, so it may still be a round away.
    assert.ok(await waitFor(async () => (await generated()) > 0, 10000));
    const g0 = await generated();
    assert.ok(await waitFor(async () => (await generated()) > g0, 10000));
    assert.ok(!streams[0].text().includes('[DONE]'));
    const r = await request(s.url, { body: { model: MODEL, messages: user('one more') } });
    assert.equal(r.status, 429);
    assert.ok(Number(r.headers['retry-after']) >= 1);
    const e = JSON.parse(r.body).error;
    assert.equal(e.code, 'queue_full');
    assert.equal(e.type, 'rate_limit_error');
    assert.ok(e.message.length > 0);
    await assert.rejects(s.client().chat.completions.create({ model: MODEL, messages: user('and another') }), (err) => err.status === 429);
  } finally {
    for (const st of streams) st.abort();
    await s.stop();
  }
});
