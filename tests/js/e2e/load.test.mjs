// Bounded load tests with autocannon: a fixed request count over a fixed set of connections,
// zero errors, timeouts or non-2xx allowed; prints p50/p99 latency (recorded in docs/perf.md).
// One against the scripted test engine (the HTTP layer's own cost), one against the embedded tiny
// model on the CPU oracle (the whole path: tokenizer, chat template, lane core, model, reply).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import autocannon from 'autocannon';
import { startServer, health } from './harness.mjs';

function run(opts) {
  return new Promise((resolve, reject) => autocannon(opts, (err, result) => (err ? reject(err) : resolve(result))));
}

test('autocannon: 600 chat requests over 16 connections, zero errors', async () => {
  const s = await startServer(['--fake-token-ms', '1', '--fake-parallel', '16']);
  try {
    const body = JSON.stringify({ model: 'deepseek-v4', messages: [{ role: 'user', content: 'say:sixteen tokens here.' }], max_tokens: 16 });
    const r = await run({ url: `${s.url}/v1/chat/completions`, method: 'POST', headers: { 'content-type': 'application/json' }, body, connections: 16, amount: 600, timeout: 20 });
    console.log(`# server load (fake engine, 1 ms rounds): ${r.requests.total} requests, 16 connections, p50 ${r.latency.p50} ms, p99 ${r.latency.p99} ms, ${r.requests.average} req/s`);
    assert.equal(r.errors, 0);
    assert.equal(r.timeouts, 0);
    assert.equal(r.non2xx, 0);
    assert.equal(r['2xx'], 600);
    const h = await health(s.url);
    assert.equal(h.in_progress, 0);
  } finally {
    await s.stop();
  }
});

test('autocannon on the tiny model: 16 chat requests over 4 connections, zero errors', async () => {
  const s = await startServer(['--context', '1024', '--parallel', '4'], { fake: false, readyTimeoutMs: 240000 });
  try {
    const body = JSON.stringify({ model: 'deepseek-v4', messages: [{ role: 'user', content: 'Name three colours.' }], max_tokens: 4, ignore_eos: true, chat_template_kwargs: { thinking: false } });
    const r = await run({ url: `${s.url}/v1/chat/completions`, method: 'POST', headers: { 'content-type': 'application/json' }, body, connections: 4, amount: 16, timeout: 60 });
    console.log(`# server load (tiny model, CPU oracle, 4 tokens each): ${r.requests.total} requests, 4 connections, p50 ${r.latency.p50} ms, p99 ${r.latency.p99} ms, ${r.requests.average} req/s`);
    assert.equal(r.errors, 0);
    assert.equal(r.timeouts, 0);
    assert.equal(r.non2xx, 0);
    assert.equal(r['2xx'], 16);
    const h = await health(s.url);
    assert.equal(h.in_progress, 0);
  } finally {
    await s.stop();
  }
});
