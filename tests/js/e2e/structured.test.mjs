// Structured outputs and strict tool calls on the embedded tiny V4.1 model (CPU oracle behind the lane core), with
// the clients users run: see structured_clients.mjs for the cases.
import { before, after } from 'node:test';
import { startServer } from './harness.mjs';
import { structuredCases } from './structured_clients.mjs';

let server;
before(async () => {
  server = await startServer(['--context', '2048', '--parallel', '4'], { fake: false, readyTimeoutMs: 240000 });
});
after(async () => server?.stop());

structuredCases(() => server, 'deepseek-v4');
