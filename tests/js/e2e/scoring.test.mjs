// Prompt scoring on the embedded model (tiny synthetic V4.1 weights, CPU oracle behind the lane
// core): `echo` + `logprobs` on /v1/completions and vLLM's `prompt_logprobs` give each prompt
// token's logprob given its prefix, equal to `forced_tokens` scoring of the same tokens and to the
// log-softmax of the logits `dsv4 run --force --dump-logits` writes for them; and the request
// lm-evaluation-harness sends for loglikelihood returns what its parser reads.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, request, parseSse, BIN } from './harness.mjs';

let server;
before(async () => {
  server = await startServer(['--context', '2048', '--parallel', '2'], { fake: false, readyTimeoutMs: 240000 });
});
after(async () => server.stop());

const post = async (pathName, body) => {
  const r = await request(server.url, { path: pathName, body, timeoutMs: 120000 });
  return { status: r.status, json: r.body.startsWith('data:') ? parseSse(r.body) : JSON.parse(r.body) };
};
const complete = async (body) => {
  const r = await post('/v1/completions', { model: 'deepseek-v4', ...body });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  return r.json;
};

// A .npy of float32 [rows, vocab] (dsv4 run --dump-logits).
function readNpy(file) {
  const buf = fs.readFileSync(file);
  const headerLen = buf.readUInt16LE(8);
  const header = buf.subarray(10, 10 + headerLen).toString('latin1');
  assert.match(header, /'descr': '<f4'/);
  const shape = header.match(/'shape': \((\d+), (\d+)\)/).slice(1).map(Number);
  const data = new Float32Array(buf.buffer.slice(buf.byteOffset + 10 + headerLen, buf.byteOffset + buf.length));
  assert.equal(data.length, shape[0] * shape[1]);
  return { rows: shape[0], vocab: shape[1], row: (i) => data.subarray(i * shape[1], (i + 1) * shape[1]) };
}

// log_softmax(row)[token] in double (max, then the sum of exp in id order), rounded to float:
// the lane core's token_logprob, written independently.
function logprob(row, token) {
  let max = -Infinity;
  for (const x of row) max = Math.max(max, x);
  let sum = 0;
  for (const x of row) sum += Math.exp(x - max);
  return Math.fround(row[token] - max - Math.log(sum));
}

const TEXT = 'The quick brown fox jumps over the lazy dog.';
let promptIds; // the tokenized TEXT with BOS, as the server tokenizes it

test('echo with max_tokens 0 returns the prompt, each token scored, the first null', async () => {
  const r = await complete({ prompt: TEXT, echo: true, max_tokens: 0, logprobs: 2 });
  const c = r.choices[0];
  const lp = c.logprobs;
  promptIds = lp.token_ids;
  const L = promptIds.length;
  assert.ok(L > 5);
  assert.equal(c.text, TEXT);
  assert.equal(c.finish_reason, 'length');
  assert.equal(r.usage.prompt_tokens, L);
  assert.equal(r.usage.completion_tokens, 0);
  for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset']) assert.equal(lp[k].length, L, k);
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(lp.top_logprobs[0], null);
  // text_offset indexes the returned text: each token's text starts there (BOS has no text).
  for (let i = 1; i < L; i++) {
    assert.ok(Number.isFinite(lp.token_logprobs[i]) && lp.token_logprobs[i] <= 0);
    assert.ok(Object.keys(lp.top_logprobs[i]).length >= 1);
    if (lp.tokens[i].length > 0 && !lp.tokens[i].startsWith('<')) assert.equal(c.text.slice(lp.text_offset[i], lp.text_offset[i] + lp.tokens[i].length), lp.tokens[i], `token ${i}`);
  }
});

test('echo logprobs == forced_tokens scoring == prompt_logprobs == dsv4 run --force logits', async () => {
  const L = promptIds.length;
  const echo = (await complete({ prompt: [promptIds], echo: true, max_tokens: 0, logprobs: 1 })).choices[0].logprobs.token_logprobs;
  // forced_tokens: the same tokens after the first, scored teacher-forced.
  const forced = (await complete({ prompt: [promptIds[0]], forced_tokens: promptIds.slice(1), logprobs: 1 })).choices[0].logprobs;
  assert.deepEqual(forced.token_ids, promptIds.slice(1));
  assert.deepEqual(echo.slice(1), forced.token_logprobs);
  // vLLM's prompt_logprobs on both endpoints: the same values.
  const pc = (await complete({ prompt: [promptIds], prompt_logprobs: 0, max_tokens: 1 })).choices[0].prompt_logprobs;
  const chat = await post('/v1/chat/completions', { model: 'deepseek-v4', messages: [{ role: 'user', content: 'hi' }], prompt_logprobs: 1, max_tokens: 1 });
  assert.equal(chat.status, 200);
  assert.equal(chat.json.prompt_logprobs[0], null);
  assert.equal(chat.json.prompt_logprobs.length, chat.json.usage.prompt_tokens);
  assert.equal(pc.length, L);
  assert.equal(pc[0], null);
  for (let i = 1; i < L; i++) {
    assert.deepEqual(Object.keys(pc[i]), [String(promptIds[i])]);
    assert.equal(pc[i][promptIds[i]].logprob, echo[i]);
  }
  // The CLI's teacher-forced logits: row i predicts token i + 1.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsv4-scoring-'));
  try {
    const npy = path.join(dir, 'logits.npy');
    execFileSync(BIN, ['run', '--ids', String(promptIds[0]), '--force', promptIds.slice(1).join(','), '--dump-logits', npy], { stdio: 'ignore', timeout: 240000 });
    const logits = readNpy(npy);
    assert.ok(logits.rows >= L - 1);
    // Both are the oracle's fp32 logits through the same double log-softmax rounded to float, so
    // the values are equal exactly.
    // (The reply writes a float by its shortest decimal; Math.fround reads it back exactly.)
    for (let i = 1; i < L; i++) assert.equal(Math.fround(echo[i]), logprob(logits.row(i - 1), promptIds[i]), `token ${i}`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('the lm-evaluation-harness loglikelihood request returns what its parser reads', async () => {
  // lm_eval's openai-completions models send token ids with echo and logprobs 1; the parser sums
  // token_logprobs[ctxlen:] (older: max_tokens 0) or [ctxlen:-1] (newer: max_tokens 1) and calls a
  // continuation greedy when each token's logprob is the max of its top_logprobs dict.
  const ctxlen = 4;
  for (const maxTokens of [0, 1]) {
    const r = await complete({ prompt: [promptIds], echo: true, max_tokens: maxTokens, logprobs: 1, temperature: 0, seed: 1234 });
    const c = r.choices.sort((a, b) => a.index - b.index)[0];
    const { tokens, token_logprobs: lps, top_logprobs: tops } = c.logprobs;
    assert.equal(tokens.length, promptIds.length + maxTokens);
    assert.equal(lps.length, tokens.length);
    assert.equal(tops.length, tokens.length);
    assert.equal(lps[0], null);
    const cont = lps.slice(ctxlen, maxTokens ? -1 : undefined);
    const contTops = tops.slice(ctxlen, maxTokens ? -1 : undefined);
    assert.equal(cont.length, promptIds.length - ctxlen);
    const sum = cont.reduce((a, b) => a + b, 0);
    assert.ok(Number.isFinite(sum) && sum < 0);
    let greedy = true;
    for (let i = 0; i < cont.length; i++) {
      const best = Math.max(...Object.values(contTops[i]));
      assert.ok(cont[i] <= best);
      if (cont[i] !== best) greedy = false;
    }
    assert.equal(typeof greedy, 'boolean');
    assert.equal(r.usage.completion_tokens, maxTokens);
  }
  // A continuation made of the greedy tokens is greedy by the parser's rule.
  const g = await complete({ prompt: [promptIds], max_tokens: 3, temperature: 0 });
  const gIds = [...promptIds];
  const more = (await complete({ prompt: [promptIds], max_tokens: 3, temperature: 0, logprobs: 1 })).choices[0].logprobs.token_ids;
  gIds.push(...more);
  assert.equal(g.choices[0].text.length > 0, true);
  const s = (await complete({ prompt: [gIds], echo: true, max_tokens: 0, logprobs: 1 })).choices[0].logprobs;
  for (let i = promptIds.length; i < gIds.length; i++) assert.equal(s.token_logprobs[i], Math.max(...Object.values(s.top_logprobs[i])), `token ${i}`);
});

test('echo with generation: the prompt then the same completion as without echo; streamed == whole', async () => {
  const body = { prompt: TEXT, max_tokens: 6, temperature: 1, seed: 42, logprobs: 1, ignore_eos: true };
  const plain = await complete(body);
  const echoed = await complete({ ...body, echo: true });
  assert.equal(echoed.choices[0].text, TEXT + plain.choices[0].text);
  assert.deepEqual(echoed.choices[0].logprobs.token_logprobs.slice(promptIds.length), plain.choices[0].logprobs.token_logprobs);
  assert.equal(echoed.usage.completion_tokens, 6);
  assert.equal(echoed.usage.prompt_tokens, promptIds.length);
  const s = await complete({ ...body, echo: true, stream: true });
  assert.ok(s.done);
  assert.ok(s.data[0].choices[0].text.startsWith('The'), 'the echo comes first');
  assert.equal(s.data.map((d) => d.choices[0]?.text ?? '').join(''), echoed.choices[0].text);
  const lps = s.data.flatMap((d) => d.choices[0]?.logprobs?.token_logprobs ?? []);
  assert.deepEqual(lps, echoed.choices[0].logprobs.token_logprobs);
});

test('a one-token prompt echoes alone; max_tokens 0 without echo is refused naming the field', async () => {
  const r = await complete({ prompt: [[promptIds[1]]], echo: true, max_tokens: 0, logprobs: 1 });
  assert.deepEqual(r.choices[0].logprobs.token_logprobs, [null]);
  assert.equal(r.choices[0].text, r.choices[0].logprobs.tokens[0]);
  assert.equal(r.usage.completion_tokens, 0);
  const bad = await post('/v1/completions', { model: 'deepseek-v4', prompt: 'x', max_tokens: 0 });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, 'max_tokens');
  // The server keeps serving.
  await complete({ prompt: 'x', max_tokens: 1 });
});
