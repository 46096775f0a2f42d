// `dsv4 serve --model DIR` on a V4-Flash-0731 checkpoint (the tiny preset that `dsv4 synth
// --variant v4-0731` writes) through the official `openai` client: chat completions whole and
// streamed, prompts rendered with the V4 grammar, seeded sampling, /v1/models, and `draft: true`
// on a model without a drafter. Expected prompt lengths come from rendering the conversation here
// with the V4 encoder's rules (below) and counting it with @huggingface/tokenizers on the same
// tokenizer.json; the other expectations are invariants (streamed = whole, drafted = undrafted,
// same seed = same draws), never a second reading of the server's own output.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { Tokenizer } from '@huggingface/tokenizers';
import { startServer, request, BIN } from './harness.mjs';
import { parsePrometheus, sample } from './prometheus.mjs';

const MODEL = 'deepseek-v4-flash-0731';
const CONTEXT = 1024;
const user = (content) => [{ role: 'user', content }];
const noThink = { chat_template_kwargs: { thinking: false } };

// The V4 / 0731 prompt grammar (DeepSeek's V4 encoder, `encoding_dsv4.py`; the vLLM and SGLang V4
// encoders carry the same rules): BOS; a system message's content follows as plain text (V4 has no
// `<｜System｜>` token, unlike V4.1); each user turn is `<｜User｜>` + content, and after the last
// one comes `<｜Assistant｜>` + `</think>` in chat mode or `<think>` in thinking mode; a past
// assistant turn is its content + EOS (chat mode drops past reasoning). Higher efforts add a
// paragraph first; these conversations use chat mode or effort low, which add nothing.
const BOS = '<｜begin▁of▁sentence｜>';
const EOS = '<｜end▁of▁sentence｜>';
function renderV4(messages, { thinking }) {
  let out = BOS;
  messages.forEach((m, i) => {
    if (m.role === 'system') out += m.content;
    else if (m.role === 'user') out += `<｜User｜>${m.content}`;
    else if (m.role === 'assistant') out += `${m.content}${EOS}`;
    const next = messages[i + 1];
    if (m.role === 'user' && (!next || next.role === 'assistant')) out += `<｜Assistant｜>${thinking ? '<think>' : '</think>'}`;
  });
  return out;
}

// The tokenizer.json the server embeds (the synthesized checkpoint carries the same bytes).
const tokenizer = new Tokenizer(JSON.parse(zlib.gunzipSync(fs.readFileSync(new URL('../../../src/tokenizer/data/deepseek_v41_tokenizer.json.gz', import.meta.url))).toString('utf8')), { clean_up_tokenization_spaces: false });
const count = (text) => tokenizer.encode(text, { add_special_tokens: false }).ids.length;

let dir;
let server;
let client;
before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsv4-0731-'));
  const synth = spawnSync(BIN, ['synth', '--preset', 'tiny', '--variant', 'v4-0731', '--no-sync', '--out', dir], { encoding: 'utf8' });
  assert.equal(synth.status, 0, synth.stderr);
  server = await startServer(['--model', dir, '--served-model-name', MODEL, '--context', String(CONTEXT), '--parallel', '2'], { fake: false, readyTimeoutMs: 240000 });
  client = server.client();
});
after(async () => {
  await server?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

async function collect(stream) {
  const out = { content: '', reasoning: '', finish: null, usage: null, logprobs: [] };
  for await (const chunk of stream) {
    if (chunk.usage) out.usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    out.content += c.delta?.content ?? '';
    out.reasoning += c.delta?.reasoning_content ?? '';
    if (c.logprobs?.content) out.logprobs.push(...c.logprobs.content);
    if (c.finish_reason) out.finish = c.finish_reason;
  }
  return out;
}

test('/v1/models names the served 0731 model with its context', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
  const r = await request(server.url, { method: 'GET', path: '/v1/models' });
  assert.equal(JSON.parse(r.body).data[0].max_model_len, CONTEXT);
});

test('chat completions, whole and streamed: prompt tokens = the V4 rendering counted by @huggingface/tokenizers', async () => {
  const messages = [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'Name a colour.' },
    { role: 'assistant', content: 'Blue.' },
    { role: 'user', content: 'Another one, with 中文 please.' },
  ];
  const body = { model: MODEL, messages, temperature: 0, max_tokens: 8, logprobs: true, top_logprobs: 2, ...noThink };
  const r = await client.chat.completions.create(body);
  assert.equal(r.model, MODEL);
  assert.equal(r.usage.prompt_tokens, count(renderV4(messages, { thinking: false })));
  if (r.choices[0].finish_reason === 'length') assert.equal(r.usage.completion_tokens, 8);
  else assert.ok(r.choices[0].finish_reason === 'stop' && r.usage.completion_tokens <= 8);
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, r.usage.completion_tokens);
  for (const e of lp) assert.equal(e.token_id, e.top_logprobs[0].token_id);  // greedy picks the top-1
  const s = await collect(await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } }));
  assert.equal(s.content, r.choices[0].message.content);
  assert.deepEqual(s.logprobs, lp);
  assert.deepEqual(s.usage, r.usage);
  assert.equal(s.finish, r.choices[0].finish_reason);

  // Thinking mode at effort low: the prompt ends in `<think>`, with no effort paragraph (the V4
  // encoders add none for low, on the original V4 and on 0731 alike).
  const t = await client.chat.completions.create({ model: MODEL, messages: user('Hi'), max_tokens: 3, seed: 1, reasoning_effort: 'low' });
  assert.equal(t.usage.prompt_tokens, count(renderV4(user('Hi'), { thinking: true })));
  assert.equal(t.usage.prompt_tokens, 5);  // BOS <｜User｜> Hi <｜Assistant｜> <think>: five single ids
});

test('seeds reproduce', async () => {
  const body = { model: MODEL, messages: user('seed test'), temperature: 1, seed: 7, max_tokens: 8, logprobs: true, ...noThink };
  const a = await client.chat.completions.create(body);
  const b = await client.chat.completions.create(body);
  assert.deepEqual(b.choices[0].logprobs, a.choices[0].logprobs);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  const s = await collect(await client.chat.completions.create({ ...body, stream: true }));
  assert.deepEqual(s.logprobs, a.choices[0].logprobs.content);
});

test('draft: true on 0731 (no drafter): served without drafts, equal to undrafted', async () => {
  const metric = async (name) => sample(parsePrometheus((await request(server.url, { method: 'GET', path: '/metrics' })).body), name, { model_name: MODEL });
  const drafted0 = await metric('dsv4:spec_decode_num_draft_tokens_total');
  for (const extra of [{ temperature: 0 }, { temperature: 1, seed: 11 }]) {
    const body = { model: MODEL, messages: user('draft or not'), max_tokens: 8, logprobs: true, ...noThink, ...extra };
    const plain = await client.chat.completions.create({ ...body, draft: false });
    const drafted = await client.chat.completions.create({ ...body, draft: true });
    assert.deepEqual(drafted.choices[0].logprobs, plain.choices[0].logprobs);
    assert.equal(drafted.choices[0].message.content, plain.choices[0].message.content);
    const s = await collect(await client.chat.completions.create({ ...body, draft: true, stream: true }));
    assert.deepEqual(s.logprobs, plain.choices[0].logprobs.content);
  }
  assert.equal(await metric('dsv4:spec_decode_num_draft_tokens_total'), drafted0);
  assert.equal(drafted0, 0);
});

test('images: 0731 has no vision tower, so /v1/models lists text input only and an image is a 400 at once', async () => {
  const r = await request(server.url, { method: 'GET', path: '/v1/models' });
  assert.deepEqual(JSON.parse(r.body).data[0].input_modalities, ['text']);
  const png = fs.readFileSync(new URL('../../data/vision/images/rgb_37x91.png', import.meta.url)).toString('base64');
  const messages = [{ role: 'user', content: [{ type: 'text', text: 'What is this?' },
                                               { type: 'image_url', image_url: { url: `data:image/png;base64,${png}` } }] }];
  await assert.rejects(client.chat.completions.create({ model: MODEL, messages, max_tokens: 2 }), (e) => {
    assert.equal(e.status, 400);
    assert.equal(e.code, 'images_not_supported');
    assert.equal(e.param, 'messages[0].content[1]');
    assert.match(e.message, /does not accept images: the checkpoint has no vision_config/);
    return true;
  });
});
