// Images in chat messages through `dsv4 serve` on the embedded tiny V4.1 model with the official `openai` client.
// Good PNG and JPEG images are served (the CPU oracle's vision tower), whole and streamed alike, and /v1/models lists
// image input; every bad image gets its own 400 naming the content part, and the server keeps serving. The image files are the vision goldens (tests/data/vision); the bomb and the 0 x 0 GIF are built
// byte by byte (CRCs from Python's zlib). Expectations are the documented errors (docs/server.md, "Images").
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { startServer, request } from './harness.mjs';

const MODEL = 'deepseek-v4';
const golden = (name) => fs.readFileSync(new URL(`../../data/vision/images/${name}`, import.meta.url));
const dataUrl = (mime, bytes) => `data:${mime};base64,${Buffer.from(bytes).toString('base64')}`;
const image = (url) => ({ type: 'image_url', image_url: { url } });
const ask = (...parts) => [{ role: 'user', content: [{ type: 'text', text: 'What is in this picture?' }, ...parts] }];
const PNG = golden('rgb_37x91.png');
// 65 bytes: a PNG declaring 100000 x 100000 RGB (IHDR, one IDAT, IEND).
const BOMB = 'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgABhqAAAYagCAIAAAAnMJyfAAAACElEQVR4nAMAAAAAAUgGidIAAAAASUVORK5CYII=';
// A GIF whose logical screen and frame are 0 x 0.
const EMPTY_GIF = 'data:image/gif;base64,R0lGODlhAAAAAIAAAAAAAP///ywAAAAAAAAAAAACAkwBADs=';

let server;
let client;
before(async () => {
  server = await startServer(['--context', '4096', '--parallel', '2', '--max-images', '3', '--max-image-bytes', '16000',
                              '--max-image-pixels', '100000'], { fake: false, readyTimeoutMs: 240000 });
  client = server.client();
});
after(async () => server.stop());

// The request's 400 as the openai client surfaces it: {status, param, code, message}.
async function refused(messages) {
  try {
    await client.chat.completions.create({ model: MODEL, messages, max_tokens: 2 });
  } catch (e) {
    return { status: e.status, param: e.param, code: e.code, message: e.message };
  }
  assert.fail('the request was served');
}

test('/v1/models lists image input', async () => {
  const r = await request(server.url, { method: 'GET', path: '/v1/models' });
  assert.deepEqual(JSON.parse(r.body).data[0].input_modalities, ['text', 'image']);
});

test('every bad image is a 400 naming its content part, and serving continues', async () => {
  const cases = [
    [image(dataUrl('image/png', PNG.subarray(0, 100))), 'invalid_image', /corrupt or truncated PNG/],
    [image(dataUrl('image/jpeg', PNG)), 'invalid_image', /declared type 'image\/jpeg' does not match the data, which is PNG/],
    [image(dataUrl('image/png', golden('rgb_640x480.png'))), 'invalid_image', /limit of 16000 bytes/],
    [image(dataUrl('image/png', golden('palette8_640x480.png'))), 'invalid_image', /640x480 = 307200 pixels, over the limit of 100000/],
    [image(BOMB), 'invalid_image', /declares 100000x100000 = 10000000000 pixels/],
    [image(EMPTY_GIF), 'invalid_image', /zero width or height/],
    [image('https://example.com/cat.png'), 'image_url_not_allowed', /--allow-image-urls/],
    [image('data:image/png;base64,@@@@'), 'invalid_image', /not base64/],
  ];
  for (const [part, code, message] of cases) {
    const e = await refused(ask(part));
    assert.equal(e.status, 400, e.message);
    assert.equal(e.param, 'messages[0].content[1]', e.message);
    assert.equal(e.code, code, e.message);
    assert.match(e.message, message);
  }
  const many = await refused(ask(image(dataUrl('image/png', PNG)), image(dataUrl('image/png', PNG)),
                                 image(dataUrl('image/png', PNG)), image(dataUrl('image/png', PNG))));
  assert.equal(many.status, 400);
  assert.equal(many.param, 'messages[0].content[4]');
  assert.equal(many.code, 'too_many_images');
  const detail = await refused(ask({ type: 'image_url', image_url: { url: dataUrl('image/png', PNG), detail: 'huge' } }));
  assert.equal(detail.param, 'messages[0].content[1].image_url.detail');
  // Still serving text.
  const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 2 });
  assert.ok(r.usage.completion_tokens >= 1);
});

test('a PNG and a JPEG are served: whole equals streamed, a repeat equals the first, usage counts the span', async () => {
  const text = await client.chat.completions.create({ model: MODEL, messages: ask(), max_tokens: 1, temperature: 0 });
  for (const [mime, name] of [['image/png', 'rgb_37x91.png'], ['image/jpeg', 'q444_37x91.jpg']]) {
    const messages = ask(image(dataUrl(mime, golden(name))));
    const whole = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 6, temperature: 0 });
    assert.equal(whole.choices.length, 1);
    assert.ok(whole.usage.completion_tokens >= 1, name);
    // The placeholder became the image's span: start, rows of image tokens each closed by a newline, end.
    assert.ok(whole.usage.prompt_tokens - text.usage.prompt_tokens > 10, `${name}: ${whole.usage.prompt_tokens}`);
    let streamed = '';
    const stream = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 6, temperature: 0, stream: true });
    for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? '';
    assert.equal(streamed, whole.choices[0].message.content, name);
    const again = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 6, temperature: 0 });
    assert.equal(again.choices[0].message.content, whole.choices[0].message.content, name);
    assert.equal(again.usage.prompt_tokens, whole.usage.prompt_tokens);
  }
});
