// Parity of the C++ tokenizer with @huggingface/tokenizers (an independent implementation) on a
// seeded corpus of >= 10,000 strings, the same vocabulary behind NFKC+Lowercase and NFD normalizers,
// and the `dsv4 tokenize` CLI; with --perf-out it also measures encode speed.
//
// usage: node tokenizer_parity.mjs --driver BIN --dsv4 BIN [--count N] [--seed S] [--perf-out FILE.json]
// Exits non-zero on any difference in ids, decoded text or round trip.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import zlib from "node:zlib";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "@huggingface/tokenizers";
import { buildCorpus } from "./tokenizer_corpus.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
const count = Number(args.count ?? 12000);
const seed = Number(args.seed ?? 20260741);
if (!args.driver || !args.dsv4) throw new Error("need --driver and --dsv4");

const jsonBytes = zlib.gunzipSync(fs.readFileSync(path.join(here, "../../src/tokenizer/data/deepseek_v41_tokenizer.json.gz")));
const tokenizerJson = JSON.parse(jsonBytes.toString("utf8"));
const tok = new Tokenizer(tokenizerJson, { clean_up_tokenization_spaces: false });
const lossy = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

const corpus = buildCorpus(tokenizerJson, count, seed); // Buffers (raw bytes; some ill-formed)
if (corpus.length < 10000) throw new Error(`corpus has ${corpus.length} strings, need >= 10000`);
const texts = corpus.map((b) => lossy.decode(b)); // what a caller holding bytes gives `tokenizers`

// Reference: ids, decoded text, and decoded text without specials.
const decode = (ids, skip) => (ids.length === 0 ? "" : tok.decode(ids, { skip_special_tokens: skip }));
// (skip_special_tokens only matters, and is only compared, where an added token occurs.)
const addedIds = new Set(tokenizerJson.added_tokens.map((t) => t.id));
const ref = texts.map((t) => {
  const ids = tok.encode(t, { add_special_tokens: false }).ids;
  const hasAdded = ids.some((id) => addedIds.has(id));
  return { ids, hasAdded, text: decode(ids, false), text_skip: hasAdded ? decode(ids, true) : null };
});

// The C++ side, fed the raw bytes.
const frames = [];
for (const b of corpus) {
  const h = Buffer.alloc(4);
  h.writeUInt32LE(b.length);
  frames.push(h, b);
}
const run = spawnSync(args.driver, ["--repeat", args["perf-out"] ? "3" : "1"], { input: Buffer.concat(frames), maxBuffer: 1 << 30 });
if (run.status !== 0) throw new Error(`driver failed (${run.status}): ${run.stderr}`);
const lines = run.stdout.toString("utf8").trimEnd().split("\n");
const timing = JSON.parse(lines.pop());
const got = lines.map((l) => JSON.parse(l));
if (got.length !== corpus.length) throw new Error(`driver returned ${got.length} results for ${corpus.length} strings`);

let failures = 0;
const fail = (i, what, a, b) => {
  if (++failures <= 20)
    console.error(`#${i} ${what}\n  input ${JSON.stringify(texts[i]).slice(0, 300)}\n  js  ${JSON.stringify(a).slice(0, 300)}\n  c++ ${JSON.stringify(b).slice(0, 300)}`);
};
const same = (a, b) => a.length === b.length && a.every((x, k) => x === b[k]);
let tokens = 0;
for (let i = 0; i < corpus.length; ++i) {
  tokens += ref[i].ids.length;
  if (!same(ref[i].ids, got[i].ids)) fail(i, "ids differ", ref[i].ids, got[i].ids);
  if (ref[i].text !== got[i].text) fail(i, "decoded text differs", ref[i].text, got[i].text);
  if (ref[i].hasAdded && ref[i].text_skip !== got[i].text_skip) fail(i, "decoded text (skip_special_tokens) differs", ref[i].text_skip, got[i].text_skip);
  if (got[i].text !== texts[i]) fail(i, "round trip differs from the input", texts[i], got[i].text);
}

// Normalizer chains (not used by V4.1, supported for other tokenizer.json files): the same
// vocabulary behind NFKC + Lowercase and behind NFD, on the first 3,000 strings. Normalized added
// tokens are then matched in their normalized spelling (e.g. "<|user|>"), after the raw pass.
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "dsv4-tok-"));
for (const normalizers of [[{ type: "NFKC" }, { type: "Lowercase" }], [{ type: "NFD" }]]) {
  const variant = { ...tokenizerJson, normalizer: { type: "Sequence", normalizers } };
  const file = path.join(tmp, "variant.json");
  fs.writeFileSync(file, JSON.stringify(variant));
  const vt = new Tokenizer(variant, { clean_up_tokenization_spaces: false });
  const n = 3000;
  const vframes = corpus.slice(0, n).flatMap((b) => {
    const h = Buffer.alloc(4);
    h.writeUInt32LE(b.length);
    return [h, b];
  });
  const vr = spawnSync(args.driver, ["--repeat", "0", "--tokenizer", file], { input: Buffer.concat(vframes), maxBuffer: 1 << 30 });
  if (vr.status !== 0) throw new Error(`driver (normalizer variant) failed (${vr.status}): ${vr.stderr}`);
  const vgot = vr.stdout.toString("utf8").trimEnd().split("\n").slice(0, n).map((l) => JSON.parse(l));
  const name = normalizers.map((x) => x.type).join("+");
  let changed = 0; // strings whose ids the normalizer changed: the variant must matter
  for (let i = 0; i < n; ++i) {
    const ids = vt.encode(texts[i], { add_special_tokens: false }).ids;
    if (!same(ids, ref[i].ids)) ++changed;
    if (!same(ids, vgot[i].ids)) fail(i, `${name}: ids differ`, ids, vgot[i].ids);
    const text = ids.length ? vt.decode(ids) : "";
    if (text !== vgot[i].text) fail(i, `${name}: decoded text differs`, text, vgot[i].text);
  }
  console.log(`normalizer ${name}: ${n} strings, ${changed} encode differently from the plain tokenizer`);
  if (changed < 100) { console.error(`normalizer ${name} changed only ${changed} strings`); ++failures; }
}

// The CLI: one JSON string per line in, one id array per line out; and back with --decode.
const cliSample = texts.slice(0, 2000);
const tokFile = path.join(tmp, "tokenizer.json");
fs.writeFileSync(tokFile, jsonBytes);
for (const extra of [[], ["--tokenizer", tokFile]]) {
  const enc = spawnSync(args.dsv4, ["tokenize", ...extra], { input: cliSample.map((t) => JSON.stringify(t)).join("\n") + "\n", maxBuffer: 1 << 28 });
  if (enc.status !== 0) { console.error(`dsv4 tokenize ${extra.join(" ")} exited ${enc.status}: ${enc.stderr}`); ++failures; continue; }
  const encLines = enc.stdout.toString("utf8").trimEnd().split("\n");
  cliSample.forEach((t, i) => {
    const ids = JSON.parse(encLines[i] ?? "null");
    if (!Array.isArray(ids) || !same(ids, ref[i].ids)) fail(i, `dsv4 tokenize ${extra.join(" ")}: ids differ`, ref[i].ids, ids);
  });
  const dec = spawnSync(args.dsv4, ["tokenize", "--decode", ...extra], { input: encLines.join("\n") + "\n", maxBuffer: 1 << 28 });
  if (dec.status !== 0) { console.error(`dsv4 tokenize --decode exited ${dec.status}: ${dec.stderr}`); ++failures; continue; }
  const decLines = dec.stdout.toString("utf8").trimEnd().split("\n");
  cliSample.forEach((t, i) => {
    const text = JSON.parse(decLines[i] ?? "null");
    if (text !== ref[i].text) fail(i, "dsv4 tokenize --decode: text differs", ref[i].text, text);
  });
}
// Bad lines: reported on stderr by line number and answered with `null` (so output line N still
// belongs to input line N); the rest is processed; the exit status is non-zero.
{
  const enc = (t) => JSON.stringify(tok.encode(t, { add_special_tokens: false }).ids);
  const r = spawnSync(args.dsv4, ["tokenize"], { input: '"ok"\nnot json\n[1,2]\n"fine"\n' });
  const out = r.stdout.toString("utf8").trimEnd().split("\n");
  const err = r.stderr.toString("utf8");
  if (r.status === 0 || !err.includes("line 2") || !err.includes("line 3") || !same(out, [enc("ok"), "null", "null", enc("fine")])) {
    console.error(`dsv4 tokenize with bad lines: status ${r.status}, stdout ${JSON.stringify(out)}, stderr ${JSON.stringify(err)}`);
    ++failures;
  }
  const d = spawnSync(args.dsv4, ["tokenize", "--decode"], { input: "[19923]\n[1, -5]\n\"x\"\n[14]\n" });
  const dout = d.stdout.toString("utf8").trimEnd().split("\n");
  const derr = d.stderr.toString("utf8");
  const want = [JSON.stringify(tok.decode([19923])), "null", "null", JSON.stringify(tok.decode([14]))];
  if (d.status === 0 || !derr.includes("line 2") || !derr.includes("line 3") || !same(dout, want)) {
    console.error(`dsv4 tokenize --decode with bad lines: status ${d.status}, stdout ${JSON.stringify(dout)}, stderr ${JSON.stringify(derr)}`);
    ++failures;
  }
}
fs.rmSync(tmp, { recursive: true });

// Speed (only with --perf-out): the same strings, best of three warm passes on each side, in wall
// time and in CPU time (process CPU for node, thread CPU for the driver).
let jsBest = Infinity, jsBestCpu = Infinity;
for (let r = 0; r < (args["perf-out"] ? 3 : 0); ++r) {
  const t0 = process.hrtime.bigint();
  const c0 = process.cpuUsage();
  for (const t of texts) tok.encode(t, { add_special_tokens: false });
  const c = process.cpuUsage(c0);
  jsBestCpu = Math.min(jsBestCpu, (c.user + c.system) * 1000);
  jsBest = Math.min(jsBest, Number(process.hrtime.bigint() - t0));
}
console.log(`tokenizer parity: ${corpus.length} strings, ${timing.bytes} bytes, ${tokens} tokens, ${failures} failures`);
if (args["perf-out"]) {
  const mbs = (ns) => +(timing.bytes / 1e6 / (ns / 1e9)).toFixed(2);
  const perf = {
    strings: corpus.length, bytes: timing.bytes, tokens,
    wall: { cpp_mb_s: mbs(timing.encode_ns), js_mb_s: mbs(jsBest), ratio: +(jsBest / timing.encode_ns).toFixed(2) },
    cpu: { cpp_mb_s: mbs(timing.encode_cpu_ns), js_mb_s: mbs(jsBestCpu), ratio: +(jsBestCpu / timing.encode_cpu_ns).toFixed(2) },
  };
  console.log(`encode speed: ${JSON.stringify(perf)}`);
  fs.writeFileSync(args["perf-out"], JSON.stringify(perf) + "\n");
}
process.exit(failures === 0 ? 0 : 1);
