// Bad input: a corpus of malformed and hostile requests, and a bounded seeded random fuzzer. Every
// corpus entry gets a 4xx with an OpenAI-shaped error; no fuzzed request gets a 5xx or a dropped
// connection; the server stays ready and a normal request afterwards succeeds.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, request, health } from './harness.mjs';

let server;
before(async () => {
  server = await startServer(['--max-body-bytes', '65536', '--max-prompt-tokens', '2000', '--max-tokens', '256', '--fake-token-ms', '0']);
});
after(async () => server.stop());

const ok = { messages: [{ role: 'user', content: 'say:fine' }] };
const withOk = (extra) => JSON.stringify({ ...ok, ...extra });

const corpus = [
  // [name, path, body (string), expected status or null for any 4xx]
  ['empty body', '/v1/chat/completions', '', 400],
  ['not json', '/v1/chat/completions', 'hello', 400],
  ['truncated json', '/v1/chat/completions', '{"messages":[{"role":"user","content":"x"}', 400],
  ['trailing garbage', '/v1/chat/completions', withOk({}) + 'xx', 400],
  ['json array', '/v1/chat/completions', '[]', 400],
  ['json null', '/v1/chat/completions', 'null', 400],
  ['json number', '/v1/completions', '12', 400],
  ['NaN literal', '/v1/chat/completions', '{"messages":[],"temperature":NaN}', 400],
  ['invalid utf-8', '/v1/chat/completions', Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}]}')]), 400],
  ['nul bytes', '/v1/chat/completions', '{"messages":\u0000[]}', 400],
  ['deep nesting', '/v1/chat/completions', '{"messages":' + '['.repeat(30000) + ']'.repeat(30000) + '}', 400],
  ['deep nesting in an unknown field', '/v1/chat/completions', withOk({ x: 1 }).slice(0, -1) + ',"y":' + '{"a":'.repeat(5000) + '1' + '}'.repeat(5000) + '}', 400],
  ['body too large', '/v1/chat/completions', withOk({ pad: 'x'.repeat(70000) }), 413],
  ['prompt too long', '/v1/completions', JSON.stringify({ prompt: 'y'.repeat(3000) }), 400],
  ['too many prompt ids', '/v1/completions', JSON.stringify({ prompt: Array(2500).fill(65) }), 400],
  ['max_tokens too big', '/v1/chat/completions', withOk({ max_tokens: 257 }), 400],
  ['max_tokens huge', '/v1/chat/completions', withOk({ max_tokens: 1e300 }), 400],
  ['max_tokens negative', '/v1/chat/completions', withOk({ max_tokens: -1 }), 400],
  ['max_tokens string', '/v1/chat/completions', withOk({ max_tokens: '10' }), 400],
  ['unknown model', '/v1/chat/completions', withOk({ model: 'gpt-4' }), 404],
  ['n = 17', '/v1/chat/completions', withOk({ n: 17 }), 400],
  ['n = 0', '/v1/chat/completions', withOk({ n: 0 }), 400],
  ['best_of on chat', '/v1/chat/completions', withOk({ best_of: 2 }), 400],
  ['top_logprobs 21', '/v1/chat/completions', withOk({ logprobs: true, top_logprobs: 21 }), 400],
  ['top_logprobs without logprobs', '/v1/chat/completions', withOk({ top_logprobs: 2 }), 400],
  ['completions logprobs 50', '/v1/completions', JSON.stringify({ prompt: 'a', logprobs: 50 }), 400],
  ['temperature -1', '/v1/chat/completions', withOk({ temperature: -1 }), 400],
  ['temperature object', '/v1/chat/completions', withOk({ temperature: {} }), 400],
  ['top_p 2', '/v1/chat/completions', withOk({ top_p: 2 }), 400],
  ['seed float', '/v1/chat/completions', withOk({ seed: 1.5 }), 400],
  ['stop of 100 strings', '/v1/chat/completions', withOk({ stop: Array(100).fill('s') }), 400],
  ['stop string too long', '/v1/chat/completions', withOk({ stop: 'z'.repeat(1000) }), 400],
  ['messages null', '/v1/chat/completions', JSON.stringify({ messages: null }), 400],
  ['message without role', '/v1/chat/completions', JSON.stringify({ messages: [{ content: 'x' }] }), 400],
  ['role number', '/v1/chat/completions', JSON.stringify({ messages: [{ role: 1, content: 'x' }] }), 400],
  ['image part', '/v1/chat/completions', JSON.stringify({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } }] }] }), 400],
  ['tool message without id', '/v1/chat/completions', JSON.stringify({ messages: [{ role: 'tool', content: 'r' }] }), 400],
  ['tools not array', '/v1/chat/completions', withOk({ tools: 'f' }), 400],
  ['tool bad name', '/v1/chat/completions', withOk({ tools: [{ type: 'function', function: { name: '$(rm -rf)' } }] }), 400],
  ['tool_choice unknown tool', '/v1/chat/completions', withOk({ tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: { type: 'function', function: { name: 'g' } } }), 400],
  ['forced_tokens out of vocab', '/v1/chat/completions', withOk({ forced_tokens: [1, 999999] }), 400],
  ['forced_tokens too many', '/v1/chat/completions', withOk({ forced_tokens: Array(300).fill(65) }), 400],
  ['prompt ids out of vocab', '/v1/completions', JSON.stringify({ prompt: [-5] }), 400],
  ['prompt batch', '/v1/completions', JSON.stringify({ prompt: ['a', 'b'] }), 400],
  ['stream_options without stream', '/v1/chat/completions', withOk({ stream_options: { include_usage: true } }), 400],
  ['presence_penalty', '/v1/chat/completions', withOk({ presence_penalty: 1 }), 400],
  ['response_format json_schema', '/v1/chat/completions', withOk({ response_format: { type: 'json_schema', json_schema: {} } }), 400],
  ['unknown path', '/v1/engines', withOk({}), 404],
  ['path traversal', '/../../etc/passwd', '', 404],
];

test('every corpus request gets a 4xx with an OpenAI-shaped error', async () => {
  for (const [name, path, body, status] of corpus) {
    const r = await request(server.url, { path, body });
    assert.equal(r.status, status, `${name}: ${r.status} ${r.body.slice(0, 200)}`);
    const e = JSON.parse(r.body).error;
    assert.equal(typeof e.message, 'string', name);
    assert.ok(e.message.length > 0, name);
    assert.ok('param' in e && 'code' in e && 'type' in e, name);
  }
  const get = await request(server.url, { method: 'GET', path: '/v1/chat/completions' });
  assert.equal(get.status, 405);
  const put = await request(server.url, { method: 'PUT', path: '/v1/chat/completions', body: '{}' });
  assert.ok(put.status >= 400 && put.status < 500);
});

// Raw HTTP that is not valid HTTP: the server answers 4xx or closes, and keeps serving.
function raw(url, bytes, waitMs = 1500) {
  return new Promise((resolve) => {
    const u = new URL(url);
    const sock = net.connect(Number(u.port), u.hostname);
    let data = '';
    const done = () => {
      sock.destroy();
      resolve(data);
    };
    sock.on('data', (d) => {
      data += d.toString();
      if (data.includes('\r\n\r\n')) done(); // a status line and headers are all we check
    });
    sock.on('close', done);
    sock.on('error', done);
    sock.setTimeout(waitMs, done);
    sock.write(bytes);
  });
}

test('malformed HTTP gets a 4xx status line, never a 5xx', async () => {
  const cases = [
    'GARBAGE\r\n\r\n',
    'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n',
    'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n{}',
    'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n' + 'X-Big: ' + 'a'.repeat(20000) + '\r\n\r\n',
    'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n',
    'GET /' + 'a'.repeat(10000) + ' HTTP/1.1\r\nHost: x\r\n\r\n',
  ];
  for (const c of cases) {
    const reply = await raw(server.url, c);
    const m = reply.match(/^HTTP\/1\.1 (\d{3})/);
    assert.ok(m, `no status line for ${JSON.stringify(c.slice(0, 60))}: ${JSON.stringify(reply.slice(0, 80))}`);
    assert.ok(Number(m[1]) >= 400 && Number(m[1]) < 500, `${m[1]} for ${JSON.stringify(c.slice(0, 60))}`);
  }
});

// xorshift32: a fixed seed makes the fuzz run the same every time.
function rng(seed) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 4294967296;
  };
}

const FIELDS = ['messages', 'model', 'max_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'top_k', 'min_p', 'seed', 'stop', 'n', 'stream', 'stream_options', 'logprobs', 'top_logprobs', 'tools', 'tool_choice', 'chat_template_kwargs', 'reasoning_effort', 'forced_tokens', 'draft', 'prompt', 'thinking', 'response_format', 'logit_bias'];

function randomValue(r, depth = 0) {
  const k = Math.floor(r() * (depth > 2 ? 7 : 9));
  switch (k) {
    case 0: return null;
    case 1: return r() < 0.5;
    case 2: return Math.floor((r() - 0.5) * 2 ** Math.floor(r() * 70));
    case 3: return (r() - 0.5) * 10 ** Math.floor(r() * 12 - 4);
    case 4: return '';
    case 5: return String.fromCharCode(...Array.from({ length: Math.floor(r() * 20) }, () => Math.floor(r() * 0xd7ff)));
    case 6: return ['user', 'assistant', 'tool', 'auto', 'none', 'required', 'high', 'function', 'text', 'deepseek-v4'][Math.floor(r() * 10)];
    case 7: return Array.from({ length: Math.floor(r() * 4) }, () => randomValue(r, depth + 1));
    default: {
      const o = {};
      for (let i = Math.floor(r() * 4); i > 0; i--) o[r() < 0.5 ? FIELDS[Math.floor(r() * FIELDS.length)] : ['role', 'content', 'type', 'function', 'name', 'arguments', 'include_usage', 'thinking'][Math.floor(r() * 8)]] = randomValue(r, depth + 1);
      return o;
    }
  }
}

function mutate(r) {
  const body = { model: 'deepseek-v4', messages: [{ role: 'user', content: 'say:fuzz' }], max_tokens: 8 };
  for (let i = 1 + Math.floor(r() * 3); i > 0; i--) body[FIELDS[Math.floor(r() * FIELDS.length)]] = randomValue(r);
  let text = JSON.stringify(body);
  const op = r();
  if (op < 0.15) text = text.slice(0, Math.floor(r() * text.length)); // truncate
  else if (op < 0.3) {
    const at = Math.floor(r() * text.length); // flip a byte
    text = text.slice(0, at) + String.fromCharCode(Math.floor(r() * 128)) + text.slice(at + 1);
  }
  return text;
}

test('a bounded random fuzzer never gets a 5xx or a dropped connection', async () => {
  const seed = 20261129;
  const r = rng(seed);
  const counts = {};
  for (let i = 0; i < 400; i++) {
    const body = mutate(r);
    const path = r() < 0.25 ? '/v1/completions' : '/v1/chat/completions';
    let res;
    try {
      res = await request(server.url, { path, body });
    } catch (e) {
      assert.fail(`seed ${seed} case ${i}: ${e.message} for ${body.slice(0, 300)}`);
    }
    counts[res.status] = (counts[res.status] ?? 0) + 1;
    assert.ok(res.status < 500, `seed ${seed} case ${i}: ${res.status} for ${body.slice(0, 300)}`);
    if (res.status >= 400) assert.equal(typeof JSON.parse(res.body).error.message, 'string');
  }
  assert.ok((counts[400] ?? 0) > 100, JSON.stringify(counts)); // most mutations are refused
});

test('after all that, the server is ready, idle, and serves a normal request', async () => {
  const h = await health(server.url);
  assert.equal(h.httpStatus, 200);
  assert.equal(h.in_progress, 0);
  const r = await server.client().chat.completions.create({ model: 'deepseek-v4', messages: [{ role: 'user', content: 'say:still here' }] });
  assert.equal(r.choices[0].message.content, 'still here');
});
