// Starts and stops `dsv4 serve` for the end-to-end tests; helpers for raw HTTP and SSE.
//
// DSV4_BIN names the dsv4 binary (CTest sets it). DSV4_E2E_ENGINE=fake (default) serves the
// scripted test engine (`--fake-engine`, src/server/fake_engine.h); the suites that need scripted
// replies use it.
import { spawn } from 'node:child_process';
import http from 'node:http';
import OpenAI from 'openai';

export const BIN = process.env.DSV4_BIN || new URL('../../../build/dsv4', import.meta.url).pathname;

// The test clients open one connection per request. The openai client's default agent keeps idle
// sockets for 4 s and the server closes idle keep-alive connections after 5 s; on a loaded 2-core
// machine the client's timer can fire late and a request go out on a socket the server is closing
// (ECONNRESET: "Connection error." with maxRetries 0). That race belongs to HTTP/1.1 keep-alive, not
// to the server under test; a client that retries (the openai default) never sees it.
export const clientAgent = new http.Agent({ keepAlive: false });

// Spawns the server on a free port; resolves once it prints "ready on http://HOST:PORT".
export async function startServer(extraArgs = [], { fake = true, readyTimeoutMs = 20000, until = 'ready' } = {}) {
  const args = ['serve', '--port', '0', ...(fake ? ['--fake-engine'] : []), ...extraArgs];
  const proc = spawn(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server not ready in time:\n${stderr}`)), readyTimeoutMs);
    proc.stderr.on('data', (d) => {
      stderr += d.toString();
      const m = stderr.match(/listening on (http:\/\/[0-9.]+:\d+)/);
      if (m && !proc.listeningUrl) proc.listeningUrl = m[1];
      if (until === 'listening' ? proc.listeningUrl : /ready on http/.test(stderr)) {
        clearTimeout(timer);
        resolve(proc.listeningUrl);
      }
    });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited (${code}) before ready:\n${stderr}`));
    });
  });
  const server = {
    url,
    proc,
    exited,
    stderr: () => stderr,
    client: (opts = {}) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, httpAgent: clientAgent, ...opts }),
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      await exited;
    },
  };
  return server;
}

// A raw HTTP request (no client library): resolves {status, headers, body}.
export function request(url, { method = 'POST', path = '/v1/chat/completions', headers = {}, body = null, timeoutMs = 10000 } = {}) {
  return new Promise((resolve, reject) => {
    const u = new URL(path, url);
    const req = http.request(
      { method, hostname: u.hostname, port: u.port, path: u.pathname + u.search, headers: { 'content-type': 'application/json', ...headers }, agent: false },
      (res) => {
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      },
    );
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`timeout ${method} ${path}`)));
    req.on('error', reject);
    if (body !== null) req.write(typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body));
    req.end();
  });
}

// Parses an SSE body into its events: {comments: n, data: [parsed JSON], done: bool}.
export function parseSse(text) {
  const out = { comments: 0, data: [], done: false, commentsBeforeData: 0 };
  for (const block of text.split('\n\n')) {
    if (!block) continue;
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) {
        out.comments += 1;
        if (out.data.length === 0) out.commentsBeforeData += 1;
      } else if (line.startsWith('data: ')) {
        const payload = line.slice(6);
        if (payload === '[DONE]') out.done = true;
        else out.data.push(JSON.parse(payload));
      }
    }
  }
  return out;
}

export async function metricsText(url) {
  const r = await request(url, { method: 'GET', path: '/metrics' });
  if (r.status !== 200) throw new Error(`/metrics ${r.status}`);
  return r.body;
}

// The value of one sample line ("name{labels} value") whose name and labels contain `needle`s.
export function metricValue(text, name, labelNeedle = '') {
  let total = null;
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = line.match(/^([^{\s]+)(\{[^}]*\})?\s+(\S+)$/);
    if (!m || m[1] !== name) continue;
    if (labelNeedle && !(m[2] || '').includes(labelNeedle)) continue;
    total = (total ?? 0) + Number(m[3]);
  }
  return total;
}

export async function health(url) {
  const r = await request(url, { method: 'GET', path: '/health' });
  return { httpStatus: r.status, ...JSON.parse(r.body) };
}

export async function waitFor(predicate, timeoutMs, stepMs = 20) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await predicate()) return true;
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
