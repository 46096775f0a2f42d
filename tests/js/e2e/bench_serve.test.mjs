// bench/serve/bench_serve.mjs against the embedded default model: the benchmark's report (every request counted,
// the token totals the requests asked for, percentiles, the plot) and a small soak of every request kind with no
// failure and a healthy server after it; bad arguments exit 2.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { BIN } from './harness.mjs';

const SCRIPT = new URL('../../../bench/serve/bench_serve.mjs', import.meta.url).pathname;

function run(args) {
  return spawnSync(process.execPath, [SCRIPT, ...args], { encoding: 'utf8', timeout: 280000 });
}

test('the benchmark reports every level with the tokens asked for', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-serve-'));
  const out = path.join(dir, 'r.json'), plot = path.join(dir, 'p.svg');
  const r = run(['--spawn', BIN, '--mix', '16/4', '--concurrency', '1,3', '--requests', '3', '--out', out, '--plot', plot]);
  assert.equal(r.status, 0, r.stdout + r.stderr);
  const rep = JSON.parse(fs.readFileSync(out, 'utf8'));
  assert.equal(rep.model, 'deepseek-v4');
  assert.deepEqual(rep.levels.map((l) => l.concurrency), [1, 3]);
  for (const l of rep.levels) {
    assert.equal(l.requests, 3);
    assert.equal(l.succeeded, 3);
    assert.equal(l.errors, 0);
    assert.equal(l.output_tokens, 3 * 4);  // ignore_eos: exactly max_tokens each
    assert.equal(l.input_tokens, 3 * 16);  // prompts as token ids: exactly the mix's input
    for (const k of ['ttft_ms', 'tpot_ms', 'e2e_ms', 'itl_ms']) {
      assert.ok(l[k].p50 > 0 && l[k].p99 >= l[k].p50, `${k}: ${JSON.stringify(l[k])}`);
    }
    assert.ok(l.e2e_ms.p50 >= l.ttft_ms.p50);
    assert.ok(Math.abs(l.output_token_throughput - l.output_tokens / l.wall_s) < 1e-6);
  }
  const svg = fs.readFileSync(plot, 'utf8');
  assert.equal((svg.match(/<circle /g) || []).length, 2);
  assert.match(r.stdout, /TTFT p50\/p99/);
});

test('a soak of every request kind ends with no failure and a healthy server', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-soak-'));
  const out = path.join(dir, 's.json');
  const r = run(['--spawn', BIN, '--soak', '20', '--soak-concurrency', '4', '--soak-max-input', '96', '--out', out]);
  assert.equal(r.status, 0, r.stdout + r.stderr);
  const s = JSON.parse(fs.readFileSync(out, 'utf8')).soak;
  assert.equal(s.errors, 0, JSON.stringify(s.error_samples));
  assert.equal(s.healthy_after, true);
  assert.equal(Object.values(s.by_kind).reduce((n, k) => n + k.requests, 0), 20);
  assert.ok(Object.keys(s.by_kind).length >= 6, JSON.stringify(s.by_kind));
  assert.ok(s.memory.length >= 2 && s.memory.every((m) => m.rss_anon_kb > 0));
});

test('bad arguments exit 2 naming the problem', () => {
  for (const [args, want] of [
    [['--url', 'http://127.0.0.1:1', '--mix', '3k'], /--mix/],
    [['--concurrency', '0', '--url', 'http://127.0.0.1:1'], /--concurrency/],
    [['--mix', '1k/1k'], /exactly one of --url and --spawn/],
    [['--url', 'http://x', '--bogus'], /unknown argument '--bogus'/],
  ]) {
    const r = run(args);
    assert.equal(r.status, 2, `${args}: ${r.stderr}`);
    assert.match(r.stderr, want);
  }
  const h = run(['--help']);
  assert.equal(h.status, 0);
  assert.match(h.stdout, /--soak N/);
});
