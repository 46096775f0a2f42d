// Operation on a real model (the embedded tiny V4.1 weights on the CPU oracle behind the lane core):
// SIGTERM drain, thinking on/off on model-written text, a tool-call round trip, and bad input
// refused while serving goes on. Expectations are invariants of the API, not server output.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { startServer, request, parseSse, health, waitFor } from './harness.mjs';

const user = (content) => [{ role: 'user', content }];
const noThink = { chat_template_kwargs: { thinking: false } };
const start = () => startServer(['--context', '2048', '--parallel', '2', '--drain-seconds', '30'], { fake: false, readyTimeoutMs: 240000 });

// A streaming request whose raw SSE text can be read while it runs; `ended` resolves with all of it.
function openStream(url, body) {
  let text = '';
  const u = new URL('/v1/chat/completions', url);
  const ended = new Promise((resolve, reject) => {
    const req = http.request({ method: 'POST', hostname: u.hostname, port: u.port, path: u.pathname, headers: { 'content-type': 'application/json' }, agent: false }, (res) => {
      res.on('data', (c) => (text += c.toString()));
      res.on('end', () => resolve(text));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(JSON.stringify({ model: 'deepseek-v4', stream: true, ...body }));
  });
  return { ended, text: () => text };
}

test('SIGTERM on a real model: the in-flight stream completes, new requests get 503, exit 0', async () => {
  const s = await start();
  try {
    const st = openStream(s.url, { messages: user('count'), max_tokens: 40, ignore_eos: true, stream_options: { include_usage: true }, ...noThink });
    assert.ok(await waitFor(async () => st.text().includes('data: '), 30000));
    s.proc.kill('SIGTERM');
    assert.ok(await waitFor(async () => (await health(s.url)).httpStatus === 503, 5000));
    const r = await request(s.url, { body: { model: 'deepseek-v4', messages: user('late') } });
    assert.equal(r.status, 503);
    assert.equal(JSON.parse(r.body).error.code, 'draining');
    assert.ok(Number(r.headers['retry-after']) > 0);
    const sse = parseSse(await st.ended);
    assert.ok(sse.done);
    assert.equal(sse.data.at(-1).usage.completion_tokens, 40);
    assert.equal(sse.data.filter((c) => c.choices?.[0]?.finish_reason).at(-1).choices[0].finish_reason, 'length');
    assert.equal((await s.exited).code, 0);
  } finally {
    await s.stop();
  }
});

test('thinking on/off, a tool-call round trip, and bad input refused while serving continues', async () => {
  const s = await start();
  try {
    const c = s.client();
    // Thinking on: the prompt ends inside <think>, so model-written text is reasoning until </think>.
    const on = await c.chat.completions.create({ model: 'deepseek-v4', messages: user('hi'), max_tokens: 6, chat_template_kwargs: { thinking: true } });
    const off = await c.chat.completions.create({ model: 'deepseek-v4', messages: user('hi'), max_tokens: 6, ...noThink });
    assert.equal(on.usage.completion_tokens, 6);
    assert.ok((on.choices[0].message.reasoning_content ?? '').length + (on.choices[0].message.content ?? '').length > 0);
    assert.ok(on.usage.completion_tokens_details.reasoning_tokens > 0);
    assert.ok(!off.choices[0].message.reasoning_content);
    assert.equal(off.usage.completion_tokens_details?.reasoning_tokens ?? 0, 0);

    // Tool call (the model's continuation forced to a DSML call), then the tool's result sent back.
    const tools = [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' } } } } }];
    const dsml = '\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="lookup">\n<｜DSML｜ parameter name="q" string="true">weather</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>';
    const first = await c.chat.completions.create({ model: 'deepseek-v4', messages: user('look it up'), tools, forced_tokens: dsml, ...noThink });
    const call = first.choices[0].message.tool_calls[0];
    assert.equal(call.function.name, 'lookup');
    const second = await c.chat.completions.create({
      model: 'deepseek-v4', tools, max_tokens: 4, ...noThink,
      messages: [...user('look it up'), { role: 'assistant', content: '', tool_calls: [call] }, { role: 'tool', tool_call_id: call.id, content: '{"temp": 21}' }],
    });
    assert.equal(second.usage.completion_tokens, 4);
    assert.ok(second.usage.prompt_tokens > first.usage.prompt_tokens);

    // Bad input: each is a 4xx naming the problem; a normal request still succeeds afterwards.
    for (const [body, param] of [
      ['{"model": "deepseek-v4", "messages": [', null],
      [{ model: 'deepseek-v4', messages: user('x'), max_tokens: 'ten' }, 'max_tokens'],
      [{ model: 'deepseek-v4', messages: user('x'), top_logprobs: 21, logprobs: true }, 'top_logprobs'],
      [{ model: 'deepseek-v4', messages: [{ role: 'wizard', content: 'x' }] }, 'messages'],
    ]) {
      const r = await request(s.url, { body });
      assert.ok(r.status >= 400 && r.status < 500, `${r.status} for ${JSON.stringify(body)}`);
      const e = JSON.parse(r.body).error;
      assert.ok(e.message.length > 0);
      if (param) assert.match(String(e.param), new RegExp(param));
    }
    const ok = await c.chat.completions.create({ model: 'deepseek-v4', messages: user('still here?'), max_tokens: 2, ...noThink });
    assert.equal(ok.usage.completion_tokens, 2);
  } finally {
    await s.stop();
  }
});
