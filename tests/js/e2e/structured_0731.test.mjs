// Structured outputs and strict tool calls on a synthesized V4-Flash-0731 model (the tiny preset `dsv4 synth
// --variant v4-0731` writes; its chat format spells the tool-call markup its own way), with the clients users run:
// see structured_clients.mjs for the cases.
import { before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, BIN } from './harness.mjs';
import { structuredCases } from './structured_clients.mjs';

const MODEL = 'deepseek-v4-flash-0731';
let dir;
let server;
before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dsv4-0731-structured-'));
  const synth = spawnSync(BIN, ['synth', '--preset', 'tiny', '--variant', 'v4-0731', '--no-sync', '--out', dir], { encoding: 'utf8' });
  assert.equal(synth.status, 0, synth.stderr);
  server = await startServer(['--model', dir, '--served-model-name', MODEL, '--context', '2048', '--parallel', '4'], { fake: false, readyTimeoutMs: 240000 });
});
after(async () => {
  await server?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

structuredCases(() => server, MODEL);
