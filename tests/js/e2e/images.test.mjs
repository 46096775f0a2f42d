// Images in chat messages through `dsv4 serve` on the embedded tiny V4.1 model with the official `openai` client.
// This build has no vision tower, so a good image is refused once it is checked ("vision tower not available") and
// /v1/models lists text input only; every bad image gets its own 400 naming the content part first, and the server
// keeps serving. The image files are the vision goldens (tests/data/vision); the bomb and the 0 x 0 GIF are built
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

test('/v1/models lists text input only: no vision tower in this build', async () => {
  const r = await request(server.url, { method: 'GET', path: '/v1/models' });
  assert.deepEqual(JSON.parse(r.body).data[0].input_modalities, ['text']);
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

test('a good image is refused once checked: the vision tower is not available', async () => {
  const e = await refused(ask(image(dataUrl('image/png', PNG))));
  assert.equal(e.status, 400);
  assert.equal(e.code, 'vision_unavailable');
  assert.equal(e.param, 'messages[0].content[1]');
  assert.match(e.message, /vision tower not available/);
  // Streaming asks get the same 400 before any event.
  const raw = await request(server.url, { body: { model: MODEL, messages: ask(image(dataUrl('image/png', PNG))), stream: true } });
  assert.equal(raw.status, 400);
  assert.equal(JSON.parse(raw.body).error.code, 'vision_unavailable');
});
