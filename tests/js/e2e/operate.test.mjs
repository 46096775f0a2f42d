// Operation: loading state, SSE keepalives, disconnect cancels, queue limit, /metrics as
// Prometheus text, and the SIGTERM drain (in-flight completes, new gets 503; deadline; a second
// signal cuts it short). Timings use the fake engine's "[[prefill-ms=N]]"/"[[token-ms=N]]" prompts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { startServer, request, parseSse, metricsText, metricValue, health, waitFor, sleep } from './harness.mjs';

const user = (content) => [{ role: 'user', content }];

// Opens a streamed chat request; resolves when the headers arrive. `text()` is the body so far.
function openStream(url, body) {
  return new Promise((resolve, reject) => {
    const u = new URL('/v1/chat/completions', url);
    const req = http.request({ method: 'POST', hostname: u.hostname, port: u.port, path: u.pathname, headers: { 'content-type': 'application/json' }, agent: false }, (res) => {
      let text = '';
      const ended = new Promise((r) => {
        res.on('end', () => r(text));
        res.on('close', () => r(text));
        res.on('error', () => r(text));
      });
      res.on('data', (c) => (text += c.toString()));
      resolve({ res, req, text: () => text, ended });
    });
    req.on('error', reject);
    req.end(JSON.stringify({ stream: true, ...body }));
  });
}

test('health says loading, and generation gets 503, until the model is ready', async () => {
  const s = await startServer(['--fake-load-ms', '1500'], { until: 'listening' });
  try {
    const h = await health(s.url);
    assert.equal(h.httpStatus, 503);
    assert.equal(h.status, 'loading');
    const r = await request(s.url, { body: { messages: user('say:x') } });
    assert.equal(r.status, 503);
    assert.equal(JSON.parse(r.body).error.code, 'model_loading');
    assert.ok(Number(r.headers['retry-after']) > 0);
    assert.ok(await waitFor(async () => (await health(s.url)).httpStatus === 200, 10000));
    const ok = await request(s.url, { body: { messages: user('say:x') } });
    assert.equal(ok.status, 200);
  } finally {
    await s.stop();
  }
});

test('SSE keepalive comments arrive before the first token of a slow prefill', async () => {
  const s = await startServer(['--sse-keepalive-seconds', '0.2']);
  try {
    const r = await request(s.url, { body: { stream: true, messages: user('[[prefill-ms=1300]]say:late') } });
    assert.equal(r.status, 200);
    assert.match(r.headers['content-type'], /text\/event-stream/);
    const sse = parseSse(r.body);
    assert.ok(sse.commentsBeforeData >= 3, `keepalives: ${sse.commentsBeforeData}`);
    assert.equal(sse.comments, sse.commentsBeforeData); // none after the first token
    assert.equal(sse.data.map((c) => c.choices[0]?.delta?.content ?? '').join(''), 'late');
    assert.ok(sse.done);
  } finally {
    await s.stop();
  }
});

test('a client that disconnects cancels its request within a round', async () => {
  const s = await startServer([]);
  try {
    // Streamed: drop the connection after the first chunk.
    const st = await openStream(s.url, { messages: user('[[token-ms=100]]go on forever'), ignore_eos: true, max_tokens: 4000 });
    assert.ok(await waitFor(async () => st.text().includes('data: '), 5000));
    assert.equal((await health(s.url)).running, 1);
    const t0 = Date.now();
    st.req.destroy();
    assert.ok(await waitFor(async () => (await health(s.url)).running === 0, 2000), 'stream not cancelled');
    const elapsed = Date.now() - t0;
    assert.ok(elapsed < 600, `cancel took ${elapsed} ms`);
    // Not streamed: abort while it waits for the whole reply.
    const ctrl = new AbortController();
    const pending = fetch(`${s.url}/v1/chat/completions`, { method: 'POST', signal: ctrl.signal, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: user('[[token-ms=100]]long'), ignore_eos: true, max_tokens: 4000 }) }).catch((e) => e);
    assert.ok(await waitFor(async () => (await health(s.url)).running === 1, 3000));
    ctrl.abort();
    await pending;
    assert.ok(await waitFor(async () => (await health(s.url)).running === 0, 2000), 'request not cancelled');
    const m = await metricsText(s.url);
    assert.equal(metricValue(m, 'dsv4:request_success_total', 'finished_reason="cancelled"'), 2);
    assert.equal((await health(s.url)).in_progress, 0);
  } finally {
    await s.stop();
  }
});

test('requests beyond --max-queue get 429 queue_full', async () => {
  const s = await startServer(['--max-queue', '2']);
  try {
    const body = { messages: user('[[token-ms=40]]say:' + 'x'.repeat(20)) };
    const first = [request(s.url, { body }), request(s.url, { body })];
    assert.ok(await waitFor(async () => (await health(s.url)).in_progress === 2, 3000));
    const extra = await Promise.all([request(s.url, { body }), request(s.url, { body })]);
    for (const r of extra) {
      assert.equal(r.status, 429);
      assert.equal(JSON.parse(r.body).error.code, 'queue_full');
      assert.equal(r.headers['retry-after'], '1');
    }
    for (const r of await Promise.all(first)) assert.equal(r.status, 200);
  } finally {
    await s.stop();
  }
});

// A strict reading of the Prometheus text exposition format 0.0.4.
function parseExposition(text) {
  const name = '[a-zA-Z_:][a-zA-Z0-9_:]*';
  const label = `[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\\\\n]|\\\\[\\\\"n])*"`;
  const sample = new RegExp(`^(${name})(?:\\{(${label}(?:,${label})*)?\\})? (-?[0-9.e+-]+|[+-]Inf|NaN)$`);
  const types = new Map();
  const samples = [];
  assert.ok(text.endsWith('\n'), 'exposition ends with a newline');
  for (const line of text.slice(0, -1).split('\n')) {
    let m;
    if ((m = line.match(new RegExp(`^# TYPE (${name}) (counter|gauge|histogram|summary|untyped)$`)))) {
      assert.ok(!types.has(m[1]), `TYPE ${m[1]} twice`);
      types.set(m[1], m[2]);
    } else if ((m = line.match(new RegExp(`^# HELP (${name}) .*$`)))) {
      // ok
    } else {
      m = line.match(sample);
      assert.ok(m, `not a sample line: ${JSON.stringify(line)}`);
      const base = m[1].replace(/_(bucket|sum|count)$/, '');
      assert.ok(types.has(m[1]) || types.get(base) === 'histogram', `sample before its TYPE: ${m[1]}`);
      samples.push({ name: m[1], labels: m[2] || '', value: Number(m[3]) });
    }
  }
  return { types, samples };
}

test('/metrics parses as Prometheus text and counts what happened', async () => {
  const s = await startServer([]);
  try {
    const c = s.client();
    await c.chat.completions.create({ model: 'deepseek-v4', messages: user('say:abc') });
    await c.completions.create({ model: 'deepseek-v4', prompt: 'say:de', max_tokens: 1 });
    await request(s.url, { body: '{bad json' });
    // The per-status HTTP counter is bumped after the response is written, so a scrape that races
    // the last response may not see it yet: scrape until it does (bounded), as Prometheus would.
    let text = await metricsText(s.url);
    for (let i = 0; i < 40 && metricValue(text, 'dsv4:http_requests_total', 'status="400"') !== 1; i++) {
      await new Promise((r) => setTimeout(r, 50));
      text = await metricsText(s.url);
    }
    const { types, samples } = parseExposition(text);
    for (const [n, t] of [
      ['dsv4:num_requests_running', 'gauge'], ['dsv4:num_requests_waiting', 'gauge'], ['dsv4:prompt_tokens_total', 'counter'],
      ['dsv4:generation_tokens_total', 'counter'], ['dsv4:request_success_total', 'counter'], ['dsv4:time_to_first_token_seconds', 'histogram'],
      ['dsv4:inter_token_latency_seconds', 'histogram'], ['dsv4:e2e_request_latency_seconds', 'histogram'], ['dsv4:prefix_cache_hits_total', 'counter'],
      ['dsv4:prefix_cache_queries_total', 'counter'], ['dsv4:prompt_cache_bytes', 'gauge'], ['dsv4:spec_decode_num_accepted_tokens_total', 'counter'],
      ['dsv4:spec_decode_num_draft_tokens_total', 'counter'], ['dsv4:num_streams_open', 'gauge'], ['dsv4:http_requests_total', 'counter'],
    ])
      assert.equal(types.get(n), t, n);
    assert.equal(metricValue(text, 'dsv4:generation_tokens_total'), 4 + 1); // "abc"+EOS, then 1 token
    assert.equal(metricValue(text, 'dsv4:request_success_total', 'finished_reason="stop"'), 1);
    assert.equal(metricValue(text, 'dsv4:request_success_total', 'finished_reason="length"'), 1);
    assert.equal(metricValue(text, 'dsv4:http_requests_total', 'status="400"'), 1);
    assert.equal(metricValue(text, 'dsv4:time_to_first_token_seconds_count'), 2);
    // Histogram buckets are cumulative and end at _count.
    const buckets = samples.filter((x) => x.name === 'dsv4:e2e_request_latency_seconds_bucket').map((x) => x.value);
    for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i] >= buckets[i - 1]);
    assert.equal(buckets.at(-1), metricValue(text, 'dsv4:e2e_request_latency_seconds_count'));
  } finally {
    await s.stop();
  }
});

test('SIGTERM drains: in-flight completes, new requests get 503, the process exits 0', async () => {
  const s = await startServer(['--drain-seconds', '20']);
  const st = await openStream(s.url, { messages: user('[[token-ms=20]]say:' + 'y'.repeat(100)), stream_options: { include_usage: true }, draft: false });
  assert.ok(await waitFor(async () => st.text().includes('data: '), 5000));
  s.proc.kill('SIGTERM');
  assert.ok(await waitFor(async () => (await health(s.url)).httpStatus === 503, 2000));
  const h = JSON.parse((await request(s.url, { method: 'GET', path: '/health' })).body);
  assert.equal(h.status, 'draining');
  assert.equal(h.in_progress, 1);
  const r = await request(s.url, { body: { messages: user('say:late') } });
  assert.equal(r.status, 503);
  assert.equal(JSON.parse(r.body).error.code, 'draining');
  assert.ok(Number(r.headers['retry-after']) > 0);
  const sse = parseSse(await st.ended);
  assert.ok(sse.done);
  assert.equal(sse.data.map((c) => c.choices[0]?.delta?.content ?? '').join(''), 'y'.repeat(100));
  assert.equal(sse.data.at(-1).usage.completion_tokens, 101);
  const { code } = await s.exited;
  assert.equal(code, 0);
});

test('past --drain-seconds the engine halts and the stream ends with an error', async () => {
  const s = await startServer(['--drain-seconds', '0.5']);
  const st = await openStream(s.url, { messages: user('[[token-ms=50]]forever'), ignore_eos: true, max_tokens: 4000 });
  assert.ok(await waitFor(async () => st.text().includes('data: '), 5000));
  const t0 = Date.now();
  s.proc.kill('SIGTERM');
  const sse = parseSse(await st.ended);
  assert.ok(sse.done);
  const last = sse.data.at(-1);
  assert.equal(last.error.code, 'unavailable');
  assert.match(last.error.message, /halted/);
  assert.equal((await s.exited).code, 0);
  assert.ok(Date.now() - t0 < 8000);
});

test('a second signal cuts the drain short', async () => {
  const s = await startServer(['--drain-seconds', '60']);
  const st = await openStream(s.url, { messages: user('[[token-ms=50]]forever'), ignore_eos: true, max_tokens: 4000 });
  assert.ok(await waitFor(async () => st.text().includes('data: '), 5000));
  s.proc.kill('SIGTERM');
  await sleep(200);
  const t0 = Date.now();
  s.proc.kill('SIGINT');
  const sse = parseSse(await st.ended);
  assert.equal(sse.data.at(-1).error.code, 'unavailable');
  assert.equal((await s.exited).code, 0);
  assert.ok(Date.now() - t0 < 7000, `exit took ${Date.now() - t0} ms`);
});
