#!/usr/bin/env node
// A serving benchmark and soak for any OpenAI-compatible server (dsv4 serve first): streamed /v1/completions
// requests with exact input and output lengths (prompts as token ids, `ignore_eos`), at each concurrency level,
// reporting time to first token (TTFT), time per output token after the first (TPOT), the gaps between streamed
// chunks (ITL), end-to-end latency (p50 / p99 each), request and token throughput; a throughput-against-latency
// plot (SVG); and a soak of mixed requests (streamed and whole, cancels, client disconnects, long prompts, tool
// calls) that counts every failure and samples the server's memory.
//
//   node bench/serve/bench_serve.mjs --url http://127.0.0.1:8000 [options]
//   node bench/serve/bench_serve.mjs --spawn build/dsv4 --serve-args "--backend cuda --parallel 64" [options]
//
// Node 18+ built-ins only. `--help` lists the options. Exit status: 0 when every request succeeded, 1 when any
// failed (the report says which), 2 on bad arguments.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import { performance } from 'node:perf_hooks';

const HELP = `bench_serve.mjs: a serving benchmark and soak through the OpenAI API.

Target (one of):
  --url URL              a running server (http://host:port)
  --spawn BIN            start BIN serve --port 0 [--serve-args] and stop it at the end (its memory is sampled)
  --serve-args "ARGS"    extra arguments for the spawned server (default: none: the embedded default model)

Benchmark:
  --mix NAME             1k/1k | 8k/1k | random | IN/OUT (tokens in / out; default 1k/1k)
  --concurrency LIST     comma-separated levels (default 1,16,64,256)
  --requests N           requests per level (default: max(16, 4 x concurrency))
  --model NAME           the model field (default: the server's first /v1/models entry)
  --vocab N              prompt token ids are drawn from [100, N) (default 1000)
  --seed N               seed of the prompts and lengths (default 1)
  --timeout-s S          per-request timeout (default 600)
  --extra JSON           fields added to every benchmark request body (e.g. '{"draft": false}')

Soak (instead of the benchmark when --soak N is given):
  --soak N               N mixed requests (streamed, whole, cancelled, disconnected, long prompts, tool calls)
  --soak-concurrency C   (default 16)
  --soak-max-input N     longest prompt of the soak in tokens (default 4096)

Output:
  --out FILE.json        the whole report as JSON
  --plot FILE.svg        token throughput against median TPOT, one point per concurrency level
  --quiet                no table on stdout
`;

function parseArgs(argv) {
  const o = { mix: '1k/1k', concurrency: [1, 16, 64, 256], requests: 0, vocab: 1000, seed: 1, timeoutS: 600,
              soak: 0, soakConcurrency: 16, soakMaxInput: 4096, serveArgs: '', quiet: false };
  const need = (i) => {
    if (i + 1 >= argv.length) throw new Error(`${argv[i]} needs a value`);
    return argv[i + 1];
  };
  const int = (s, name, min = 1) => {
    const v = Number(s);
    if (!Number.isInteger(v) || v < min) throw new Error(`${name}: expected an integer >= ${min}, got '${s}'`);
    return v;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    switch (a) {
      case '--help': case '-h': o.help = true; break;
      case '--url': o.url = need(i); i++; break;
      case '--spawn': o.spawn = need(i); i++; break;
      case '--serve-args': o.serveArgs = need(i); i++; break;
      case '--mix': o.mix = need(i); i++; break;
      case '--concurrency': o.concurrency = need(i).split(',').map((s) => int(s, '--concurrency')); i++; break;
      case '--requests': o.requests = int(need(i), '--requests'); i++; break;
      case '--model': o.model = need(i); i++; break;
      case '--vocab': o.vocab = int(need(i), '--vocab', 101); i++; break;
      case '--seed': o.seed = int(need(i), '--seed', 0); i++; break;
      case '--timeout-s': o.timeoutS = int(need(i), '--timeout-s'); i++; break;
      case '--extra':
        try {
          o.extra = JSON.parse(need(i));
        } catch (e) {
          throw new Error(`--extra: not JSON (${e.message})`);
        }
        if (typeof o.extra !== 'object' || o.extra === null || Array.isArray(o.extra)) throw new Error('--extra: expected a JSON object');
        i++;
        break;
      case '--soak': o.soak = int(need(i), '--soak'); i++; break;
      case '--soak-concurrency': o.soakConcurrency = int(need(i), '--soak-concurrency'); i++; break;
      case '--soak-max-input': o.soakMaxInput = int(need(i), '--soak-max-input', 64); i++; break;
      case '--out': o.out = need(i); i++; break;
      case '--plot': o.plot = need(i); i++; break;
      case '--quiet': o.quiet = true; break;
      default: throw new Error(`unknown argument '${a}' (--help lists them)`);
    }
  }
  if (!o.help && !o.url === !o.spawn) throw new Error('give exactly one of --url and --spawn');
  mixLengths(o.mix, () => 0.5);  // validates the name
  return o;
}

// A deterministic generator (mulberry32) for prompts and lengths.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// [input tokens, output tokens] of one request of a mix.
function mixLengths(mix, r) {
  if (mix === '1k/1k') return [1024, 1024];
  if (mix === '8k/1k') return [8192, 1024];
  if (mix === 'random') return [64 + Math.floor(r() * 4032), 16 + Math.floor(r() * 1008)];  // 64-4095 in, 16-1023 out
  const m = /^(\d+)\/(\d+)$/.exec(mix);
  if (!m || Number(m[1]) < 1 || Number(m[2]) < 1) throw new Error(`--mix: 1k/1k, 8k/1k, random or IN/OUT, got '${mix}'`);
  return [Number(m[1]), Number(m[2])];
}

const agent = new http.Agent({ keepAlive: false });

// One HTTP request: resolves {status, body}; with onChunk, the body's bytes are handed over as they come.
function httpRequest(url, path, { method = 'POST', body = null, timeoutMs, onChunk, onResponse } = {}) {
  return new Promise((resolve, reject) => {
    const u = new URL(path, url);
    const req = http.request({ method, hostname: u.hostname, port: u.port, path: u.pathname, agent,
                               headers: { 'content-type': 'application/json' } }, (res) => {
      if (onResponse) onResponse(res, req);
      const chunks = [];
      res.on('data', (c) => {
        if (onChunk) onChunk(c);
        chunks.push(c);
      });
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
      res.on('aborted', () => reject(new Error('response aborted')));
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`timed out after ${timeoutMs} ms`)));
    req.on('error', reject);
    if (body !== null) req.write(JSON.stringify(body));
    req.end();
  });
}

// A streamed completion: measures the first chunk, the gaps between chunks and the end; checks the stream
// ended with [DONE] and carried the requested number of tokens (usage).
async function streamedCompletion(url, model, prompt, maxTokens, timeoutMs, { abortAfterFirst = false, disconnect = false, extra = {} } = {}) {
  const t0 = performance.now();
  let first = -1, last = -1, text = '';
  const gaps = [];
  let req = null;
  const body = { model, prompt, max_tokens: maxTokens, ignore_eos: true, temperature: 0, stream: true,
                 stream_options: { include_usage: true }, ...extra };
  try {
    const res = await httpRequest(url, '/v1/completions', {
      body, timeoutMs,
      onResponse: (_res, r) => {
        req = r;
        if (disconnect) r.destroy();  // the client goes away before reading anything
      },
      onChunk: (c) => {
        const now = performance.now();
        const s = c.toString('utf8');
        text += s;
        if (!s.includes('"choices"')) return;
        if (first < 0) {
          first = now;
          if (abortAfterFirst) req.destroy();
        } else {
          gaps.push(now - last);
        }
        last = now;
      },
    });
    if (res.status !== 200) return { ok: false, error: `HTTP ${res.status}: ${res.body.slice(0, 200)}` };
  } catch (e) {
    if (abortAfterFirst || disconnect) return { ok: true, cancelled: true };
    return { ok: false, error: String(e.message || e) };
  }
  if (abortAfterFirst || disconnect) return { ok: true, cancelled: true };
  const end = performance.now();
  if (!text.includes('data: [DONE]')) return { ok: false, error: 'the stream did not end with [DONE]' };
  let usage = null;
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const j = JSON.parse(line.slice(6));
    if (j.error) return { ok: false, error: `error event: ${JSON.stringify(j.error).slice(0, 200)}` };
    if (j.usage) usage = j.usage;
  }
  if (!usage) return { ok: false, error: 'no usage chunk' };
  if (usage.completion_tokens !== maxTokens)
    return { ok: false, error: `${usage.completion_tokens} tokens for max_tokens ${maxTokens} (ignore_eos)` };
  const ttft = first - t0, e2e = end - t0;
  return { ok: true, ttft, e2e, tpot: maxTokens > 1 ? (last - first) / (maxTokens - 1) : 0, gaps,
           inTokens: usage.prompt_tokens, outTokens: usage.completion_tokens };
}

function percentile(xs, p) {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
}

// Runs `jobs` (functions returning promises) with at most `c` in flight.
async function pool(jobs, c) {
  const out = new Array(jobs.length);
  let next = 0;
  async function worker() {
    while (next < jobs.length) {
      const i = next++;
      out[i] = await jobs[i]();
    }
  }
  await Promise.all(Array.from({ length: Math.min(c, jobs.length) }, worker));
  return out;
}

function promptIds(r, n, vocab) {
  const ids = new Array(n);
  for (let i = 0; i < n; i++) ids[i] = 100 + Math.floor(r() * (vocab - 100));
  return ids;
}

async function benchLevel(o, url, model, c) {
  const r = rng(o.seed * 7919 + c);
  const n = o.requests || Math.max(16, 4 * c);
  const jobs = [];
  for (let i = 0; i < n; i++) {
    const [inTok, outTok] = mixLengths(o.mix, r);
    const prompt = promptIds(r, inTok, o.vocab);
    jobs.push(() => streamedCompletion(url, model, prompt, outTok, o.timeoutS * 1000, { extra: o.extra || {} }));
  }
  const t0 = performance.now();
  const res = await pool(jobs, c);
  const wall = (performance.now() - t0) / 1000;
  const ok = res.filter((x) => x.ok);
  const errors = res.filter((x) => !x.ok).map((x) => x.error);
  const outTokens = ok.reduce((s, x) => s + x.outTokens, 0), inTokens = ok.reduce((s, x) => s + x.inTokens, 0);
  const stat = (key) => ({ p50: percentile(ok.map((x) => x[key]), 50), p99: percentile(ok.map((x) => x[key]), 99) });
  const gaps = ok.flatMap((x) => x.gaps);
  return {
    concurrency: c, requests: n, succeeded: ok.length, errors: errors.length, error_samples: errors.slice(0, 5),
    wall_s: wall, request_throughput: ok.length / wall, output_token_throughput: outTokens / wall,
    total_token_throughput: (inTokens + outTokens) / wall, input_tokens: inTokens, output_tokens: outTokens,
    ttft_ms: stat('ttft'), tpot_ms: stat('tpot'), e2e_ms: stat('e2e'),
    itl_ms: { p50: percentile(gaps, 50), p99: percentile(gaps, 99) },
  };
}

// The soak's request kinds, in the proportions of a mixed workload.
const SOAK_KINDS = ['stream', 'stream', 'stream', 'whole', 'whole', 'cancel', 'disconnect', 'long', 'tools', 'chat'];

async function soakOne(url, model, kind, r, o) {
  const timeoutMs = o.timeoutS * 1000;
  const [inAny, outTok] = mixLengths('random', r);
  const inTok = 64 + (inAny % (o.soakMaxInput - 63));
  const small = Math.max(8, Math.floor(outTok / 8));
  switch (kind) {
    case 'stream': return streamedCompletion(url, model, promptIds(r, Math.min(inTok, 512), o.vocab), small, timeoutMs);
    case 'cancel': return streamedCompletion(url, model, promptIds(r, 64, o.vocab), 64, timeoutMs, { abortAfterFirst: true });
    case 'disconnect': return streamedCompletion(url, model, promptIds(r, 64, o.vocab), 64, timeoutMs, { disconnect: true });
    case 'long': return streamedCompletion(url, model, promptIds(r, inTok, o.vocab), 8, timeoutMs);
    case 'whole': case 'chat': case 'tools': {
      const path = kind === 'whole' ? '/v1/completions' : '/v1/chat/completions';
      const body = kind === 'whole'
        ? { model, prompt: promptIds(r, 128, o.vocab), max_tokens: small, ignore_eos: true }
        : { model, messages: [{ role: 'user', content: `Tell me about the number ${Math.floor(r() * 1000)}.` }],
            max_tokens: 32 };
      if (kind === 'tools') {
        body.tools = [{ type: 'function', function: { name: 'lookup', description: 'Looks a number up.',
                                                      parameters: { type: 'object', properties: { n: { type: 'integer' } } } } }];
        body.tool_choice = 'required';
        body.max_tokens = 64;
      }
      try {
        const res = await httpRequest(url, path, { body, timeoutMs });
        if (res.status !== 200) return { ok: false, error: `${kind}: HTTP ${res.status}: ${res.body.slice(0, 200)}` };
        const j = JSON.parse(res.body);
        const choice = j.choices && j.choices[0];
        if (!choice) return { ok: false, error: `${kind}: no choices` };
        if (kind === 'tools' && !(choice.message.tool_calls && choice.message.tool_calls.length > 0))
          return { ok: false, error: 'tools: tool_choice required returned no tool call' };
        if (kind === 'whole' && j.usage.completion_tokens !== small)
          return { ok: false, error: `whole: ${j.usage.completion_tokens} tokens for ${small}` };
        return { ok: true };
      } catch (e) {
        return { ok: false, error: `${kind}: ${e.message || e}` };
      }
    }
    default: throw new Error(kind);
  }
}

// The spawned server's memory (kB) from /proc: resident anonymous and file-backed.
function memoryOf(pid) {
  try {
    const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (k) => Number((new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(s) || [])[1] || 0);
    return { rss_anon_kb: kb('RssAnon'), rss_file_kb: kb('RssFile') };
  } catch {
    return null;
  }
}

async function soak(o, url, model, pid) {
  const r = rng(o.seed);
  const kinds = Array.from({ length: o.soak }, (_, i) => SOAK_KINDS[(i * 7 + Math.floor(r() * 3)) % SOAK_KINDS.length]);
  const memory = [];
  const sample = () => { if (pid) { const m = memoryOf(pid); if (m) memory.push({ t_s: (performance.now() - t0) / 1000, ...m }); } };
  const t0 = performance.now();
  sample();
  const timer = setInterval(sample, 1000);
  const res = await pool(kinds.map((k) => () => soakOne(url, model, k, r, o)), o.soakConcurrency);
  clearInterval(timer);
  // Let the server settle (cancelled streams end), then take the last sample.
  await new Promise((f) => setTimeout(f, 1000));
  sample();
  const byKind = {};
  kinds.forEach((k, i) => {
    byKind[k] ??= { requests: 0, errors: 0 };
    byKind[k].requests++;
    if (!res[i].ok) byKind[k].errors++;
  });
  const errors = res.filter((x) => !x.ok).map((x) => x.error);
  const health = await httpRequest(url, '/health', { method: 'GET', timeoutMs: 10000 }).catch((e) => ({ status: 0, body: String(e) }));
  return { requests: o.soak, concurrency: o.soakConcurrency, wall_s: (performance.now() - t0) / 1000,
           errors: errors.length, error_samples: errors.slice(0, 10), by_kind: byKind,
           healthy_after: health.status === 200, memory };
}

async function startServer(bin, extra) {
  const args = ['serve', '--port', '0', ...extra.split(/\s+/).filter(Boolean)];
  const proc = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const url = await new Promise((resolve, reject) => {
    proc.stderr.on('data', (d) => {
      stderr += d.toString();
      const m = stderr.match(/ready on (http:\/\/[0-9.]+:\d+)/);
      if (m) resolve(m[1]);
    });
    proc.on('exit', (code) => reject(new Error(`the server exited (${code}) before it was ready:\n${stderr}`)));
  });
  return { proc, url };
}

function svgPlot(levels, title) {
  const W = 640, H = 420, L = 70, B = 50, T = 40, R = 20;
  const pts = levels.filter((l) => l.tpot_ms.p50 !== null).map((l) => [l.tpot_ms.p50, l.output_token_throughput, l.concurrency]);
  if (pts.length === 0) return '';
  const maxX = Math.max(...pts.map((p) => p[0])) * 1.1 || 1, maxY = Math.max(...pts.map((p) => p[1])) * 1.1 || 1;
  const x = (v) => L + (v / maxX) * (W - L - R), y = (v) => H - B - (v / maxY) * (H - B - T);
  const esc = (s) => String(s).replace(/[<&>]/g, (c) => ({ '<': '&lt;', '&': '&amp;', '>': '&gt;' })[c]);
  let s = `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">\n`;
  s += `<rect width="${W}" height="${H}" fill="white"/>\n<text x="${W / 2}" y="20" text-anchor="middle">${esc(title)}</text>\n`;
  s += `<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="black"/><line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="black"/>\n`;
  for (let i = 0; i <= 4; i++) {
    const vx = (maxX * i) / 4, vy = (maxY * i) / 4;
    s += `<text x="${x(vx)}" y="${H - B + 16}" text-anchor="middle">${vx.toFixed(1)}</text>`;
    s += `<text x="${L - 6}" y="${y(vy) + 4}" text-anchor="end">${vy.toFixed(0)}</text>\n`;
  }
  s += `<text x="${(L + W - R) / 2}" y="${H - 12}" text-anchor="middle">median time per output token (ms)</text>\n`;
  s += `<text x="16" y="${(T + H - B) / 2}" transform="rotate(-90 16 ${(T + H - B) / 2})" text-anchor="middle">output tokens / s</text>\n`;
  s += `<polyline fill="none" stroke="steelblue" stroke-width="2" points="${pts.map((p) => `${x(p[0])},${y(p[1])}`).join(' ')}"/>\n`;
  for (const p of pts)
    s += `<circle cx="${x(p[0])}" cy="${y(p[1])}" r="4" fill="steelblue"/><text x="${x(p[0]) + 6}" y="${y(p[1]) - 6}">c=${p[2]}</text>\n`;
  return s + '</svg>\n';
}

function fmt(v, d = 1) { return v === null || v === undefined ? '-' : v.toFixed(d); }

async function main() {
  let o;
  try {
    o = parseArgs(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`bench_serve: ${e.message}\n`);
    process.exit(2);
  }
  if (o.help) {
    process.stdout.write(HELP);
    return 0;
  }
  let server = null, url = o.url;
  if (o.spawn) {
    server = await startServer(o.spawn, o.serveArgs);
    url = server.url;
  }
  try {
    let model = o.model;
    if (!model) {
      const m = await httpRequest(url, '/v1/models', { method: 'GET', timeoutMs: 10000 });
      model = JSON.parse(m.body).data[0].id;
    }
    const report = { date: new Date().toISOString(), url, model, mix: o.mix, extra: o.extra,
                     serve_args: o.spawn ? o.serveArgs : undefined };
    let failed = false;
    if (o.soak > 0) {
      report.soak = await soak(o, url, model, server ? server.proc.pid : 0);
      failed = report.soak.errors > 0 || !report.soak.healthy_after;
      if (!o.quiet) {
        const s = report.soak;
        process.stdout.write(`soak: ${s.requests} requests at concurrency ${s.concurrency} in ${fmt(s.wall_s)} s, ${s.errors} errors, healthy after: ${s.healthy_after}\n`);
        for (const [k, v] of Object.entries(s.by_kind)) process.stdout.write(`  ${k.padEnd(10)} ${v.requests} requests, ${v.errors} errors\n`);
        for (const e of s.error_samples) process.stdout.write(`  error: ${e}\n`);
        if (s.memory.length > 1) {
          const a = s.memory[0], z = s.memory[s.memory.length - 1];
          const peak = Math.max(...s.memory.map((m) => m.rss_anon_kb));
          process.stdout.write(`  server RssAnon: ${fmt(a.rss_anon_kb / 1024)} MiB at start, ${fmt(peak / 1024)} peak, ${fmt(z.rss_anon_kb / 1024)} at the end\n`);
        }
      }
    } else {
      report.levels = [];
      if (!o.quiet)
        process.stdout.write('conc  reqs  err   req/s   out tok/s   TTFT p50/p99 ms     TPOT p50/p99 ms   ITL p50/p99 ms    E2E p50/p99 s\n');
      for (const c of o.concurrency) {
        const l = await benchLevel(o, url, model, c);
        report.levels.push(l);
        failed ||= l.errors > 0;
        if (!o.quiet)
          process.stdout.write(`${String(c).padStart(4)}  ${String(l.requests).padStart(4)}  ${String(l.errors).padStart(3)}  ${fmt(l.request_throughput, 2).padStart(6)}  ${fmt(l.output_token_throughput).padStart(10)}  ` +
            `${fmt(l.ttft_ms.p50).padStart(8)}/${fmt(l.ttft_ms.p99).padEnd(8)}  ${fmt(l.tpot_ms.p50, 2).padStart(7)}/${fmt(l.tpot_ms.p99, 2).padEnd(8)}  ` +
            `${fmt(l.itl_ms.p50, 2).padStart(6)}/${fmt(l.itl_ms.p99, 2).padEnd(8)}  ${fmt(l.e2e_ms.p50 / 1000, 2)}/${fmt(l.e2e_ms.p99 / 1000, 2)}\n`);
        for (const e of l.error_samples) process.stdout.write(`  error: ${e}\n`);
      }
      if (o.plot) fs.writeFileSync(o.plot, svgPlot(report.levels, `${model}, mix ${o.mix}`));
    }
    if (o.out) fs.writeFileSync(o.out, JSON.stringify(report, null, 2) + '\n');
    return failed ? 1 : 0;
  } finally {
    if (server) {
      server.proc.kill('SIGTERM');
      await new Promise((f) => server.proc.on('exit', f));
    }
  }
}

main().then((code) => process.exit(code), (e) => {
  process.stderr.write(`bench_serve: ${e.stack || e}\n`);
  process.exit(1);
});
