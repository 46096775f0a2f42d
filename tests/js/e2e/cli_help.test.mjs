// `dsv4 --help` lists every subcommand registered in src/cli (DSV4_COMMAND in cmd_*.cc), and every
// subcommand's --help documents every flag it takes: each option line carries a description.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { spawnSync } from 'node:child_process';
import { BIN } from './harness.mjs';

const cliDir = new URL('../../../src/cli/', import.meta.url);

// Command names as the sources register them: DSV4_COMMAND("name", ...).
function registeredCommands() {
  const names = [];
  for (const f of fs.readdirSync(cliDir).filter((f) => /^cmd_.*\.cc$/.test(f))) {
    for (const m of fs.readFileSync(new URL(f, cliDir), 'utf8').matchAll(/DSV4_COMMAND\(\s*"([^"]+)"/g)) names.push(m[1]);
  }
  return names.sort();
}

// CLI11's option table: "  --flag TYPE=default   description", the description on the same line
// after two or more spaces, or alone on the next, deeper-indented line.
function options(help) {
  const lines = help.split('\n');
  const start = lines.findIndex((l) => /^Options:/.test(l));
  assert.ok(start >= 0, help);
  const out = [];
  for (let i = start + 1; i < lines.length; i++) {
    const l = lines[i];
    const m = l.match(/^ {2}(-\S+(?:,\S+)?)(.*)$/);
    if (!m) continue;
    const sameLine = m[2].match(/\S\s{2,}(\S.*)$/) ?? m[2].match(/^\s{2,}(\S.*)$/);
    const next = lines[i + 1] ?? '';
    const nextLine = /^ {6,}\S/.test(next) && !/^ {2}-/.test(next) ? next.trim() : null;
    out.push({ flag: m[1], description: sameLine ? sameLine[1] : nextLine });
  }
  return out;
}

test('dsv4 --help lists every registered subcommand', () => {
  const r = spawnSync(BIN, ['--help'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  const listed = [...r.stdout.matchAll(/^ {2}([a-z][a-z0-9-]*) {2,}\S/gm)].map((m) => m[1]).sort();
  assert.deepEqual(listed, registeredCommands());
});

test('every subcommand documents every flag', () => {
  for (const cmd of registeredCommands()) {
    const r = spawnSync(BIN, [cmd, '--help'], { encoding: 'utf8' });
    assert.equal(r.status, 0, `${cmd}: ${r.stderr}`);
    const opts = options(r.stdout);
    assert.ok(opts.length >= 2, `${cmd} lists ${opts.length} options`);
    for (const o of opts) assert.ok(o.description && o.description.length >= 8, `dsv4 ${cmd} ${o.flag} has no description`);
  }
});
