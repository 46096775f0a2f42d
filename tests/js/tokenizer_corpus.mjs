// Seeded corpus for the tokenizer parity test: multilingual text, code, emoji, whitespace runs,
// U+0085/U+180E, ill-formed UTF-8 bytes, digits, CJK, and every added token in context.
//
// Code points come from blocks whose General_Category is the same in Unicode 14 (Oniguruma 6.9.8)
// and in Node's newer ICU, so engine Unicode versions cannot cause differences.

// mulberry32: small, well-known 32-bit PRNG; any seed gives the same sequence everywhere.
function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n) => Math.floor(next() * n);
  return { next, int, pick: (xs) => xs[int(xs.length)], range: (lo, hi) => lo + int(hi - lo + 1) };
}

const PHRASES = [
  "The quick brown fox jumps over the lazy dog.", "It's 12345 o'clock, isn't it?", "Hello, world!",
  "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.", "Le cœur déçu mais l'âme plutôt naïve.",
  "¿Dónde está la biblioteca? ¡Aquí!", "Съешь же ещё этих мягких французских булок, да выпей чаю.",
  "Τάχιστη αλώπηξ βαφής ψημένη γη, δρασκελίζει υπέρ νωθρού κυνός.", "我能吞下玻璃而不伤身体。", "毕老师！1 + 1 = 2",
  "今日は良い天気ですね。カタカナとひらがな。", "다람쥐 헌 쳇바퀴에 타고파. 가나다라", "ایک دو تین — مرحبا بالعالم",
  "שלום עולם, מה שלומך?", "नमस्ते दुनिया, यह एक परीक्षण है।", "สวัสดีชาวโลก ภาษาไทย", "Xin chào thế giới! Tiếng Việt có dấu.",
  "Ελληνικά και English mixed 混合 text", "naïve café résumé coöperate", "e\u0301 vs é, n\u0303 vs ñ",
  "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 ∑∫∂√∞ ≤≥≠", "€100, £50, ¥1000, ₹20, $3.50", "½ ¾ ² ³ Ⅻ ⅷ", "a~b ~c ~~ ~", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ１２３",
  "Ünïcödé ŧëxŧ wïŧħ ðïäçrïŧïçş", "Mongolian ᠮᠣᠩᠭᠣᠯ", "Ethiopic ሰላም ዓለም", "Armenian Բարեւ աշխարհ",
];
const CODE = [
  "int main(int argc, char** argv) {\n  return 0;\n}\n", "def f(x):\n    return x ** 2  # square\n",
  "const xs = [1, 2, 3].map((x) => x * 2);", "for (size_t i = 0; i < n; ++i) a[i] += b[i];",
  '{"key": "value", "n": 42, "arr": [true, false, null]}', "SELECT * FROM users WHERE id = 7;",
  "<div class=\"x\"><a href='https://example.com/?q=1&r=2'>link</a></div>", "$ ls -la /usr/bin | grep -E '^d' > out.txt",
  "#include <vector>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n", "x=>{return x?.y??z}", "fn main() { println!(\"{}\", 1_000); }",
  "if __name__ == '__main__':\r\n\tmain()\r\n", "a+=1;b-=2;c*=3;d/=4;e%=5;f<<=1;g>>=2;", "@decorator\nclass A(B, metaclass=M): pass",
  "\\begin{equation} e^{i\\pi} + 1 = 0 \\end{equation}", "// TODO(x): fix this\n/* block */", "0x1F, 0b1010, 1e-9, 3.14159, -42",
];
const EMOJI = ["😀", "🌍", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "👍🏽", "❤️", "🇯🇵", "🇺🇸", "✅", "🔥", "🤖", "🎉", "⚡", "🦀", "☕", "🧪", "🥰", "🙂"];
const SPACES = [" ", "  ", "\t", "\n", "\r", "\r\n", "\n\n", "\u0085", "\u00a0", "\u180e", "\u3000", "\u2028", "\u2029", "\u200b",
  "\ufeff", "\u000b", "\u000c", "\u001c", "\u001d", "\u001e", "\u001f", "\u1680", "\u2000", "\u2009", "\u202f", "\u205f"];
const DIGITS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "０１２３４５６７８９", "๐๑๒๓๔๕๖๗๘๙", "߀߁߂߃", "²³¹¼½¾", "ⅠⅡⅢⅣⅤ"];
// Ill-formed UTF-8: encoded surrogates (CESU-8), overlongs, stray continuations, bytes never used,
// truncated sequences.
const BAD = [[0xed, 0xa0, 0x80], [0xed, 0xbf, 0xbf], [0xed, 0xb0, 0x80], [0xc0, 0x80], [0xc1, 0xbf], [0xe0, 0x80, 0x80],
  [0xf0, 0x80, 0x80, 0x80], [0xf4, 0x90, 0x80, 0x80], [0x80], [0xbf], [0xfe], [0xff], [0xf8, 0x88, 0x80, 0x80, 0x80],
  [0xe4, 0xbd], [0xf0, 0x9f, 0x98], [0xc3], [0xe2, 0x82]];
// [lo, hi] code point ranges, each fully assigned (or fully unassigned) since Unicode 12 or earlier.
const RANGES = [[0x20, 0x7e], [0xa1, 0x17f], [0x180, 0x24f], [0x250, 0x2af], [0x300, 0x36f], [0x391, 0x3a1], [0x3a3, 0x3c9],
  [0x400, 0x4ff], [0x531, 0x556], [0x5d0, 0x5ea], [0x620, 0x64a], [0x660, 0x669], [0x905, 0x939], [0x966, 0x96f],
  [0xe01, 0xe3a], [0xe50, 0xe59], [0x10a0, 0x10c5], [0x1100, 0x11ff], [0x1e00, 0x1eff], [0x2010, 0x2027], [0x2030, 0x205e],
  [0x20a0, 0x20bd], [0x2100, 0x214f], [0x2190, 0x21ff], [0x2200, 0x22ff], [0x2500, 0x257f], [0x2600, 0x26ff], [0x3001, 0x303f],
  [0x3041, 0x3096], [0x3099, 0x309f], [0x30a0, 0x30ff], [0x3131, 0x318e], [0x4e00, 0x9fa5], [0x9fa6, 0x9fcb], [0xac00, 0xd7a3],
  [0xf900, 0xfa2d], [0xff01, 0xff5e], [0xff61, 0xff9f], [0x1d400, 0x1d454], [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f],
  [0x1f910, 0x1f93e], [0x20000, 0x2a6d6]];

export function buildCorpus(tokenizerJson, count, seed) {
  const r = rng(seed);
  const added = tokenizerJson.added_tokens.map((t) => t.content);
  const enc = (s) => Buffer.from(s, "utf8");
  const randomChar = () => {
    const [lo, hi] = r.pick(RANGES);
    return String.fromCodePoint(r.range(lo, hi));
  };
  const randomChars = (n) => Array.from({ length: n }, randomChar).join("");
  const whitespace = (n) => Array.from({ length: n }, () => r.pick(SPACES)).join("");
  const digits = () => {
    const d = r.pick(DIGITS);
    return Array.from({ length: r.range(1, 30) }, () => (r.next() < 0.1 ? r.pick([" ", ",", ".", "-"]) : [...d][r.int([...d].length)])).join("");
  };
  const fragment = () => {
    switch (r.int(8)) {
      case 0: return r.pick(PHRASES);
      case 1: return r.pick(CODE);
      case 2: return r.pick(EMOJI);
      case 3: return whitespace(r.range(1, 12));
      case 4: return digits();
      case 5: return randomChars(r.range(1, 12));
      case 6: return r.pick(added);
      default: return String.fromCharCode(r.range(0x20, 0x7e)).repeat(r.range(1, 4));
    }
  };
  // Splices ill-formed bytes into a well-formed string at random byte positions.
  const withBadBytes = (s) => {
    let b = enc(s);
    for (let k = r.range(1, 3); k > 0; --k) {
      const at = r.int(b.length + 1);
      b = Buffer.concat([b.subarray(0, at), Buffer.from(r.pick(BAD)), b.subarray(at)]);
    }
    return b;
  };

  const out = [];
  // Every added token in context: bare, between text, glued to neighbours, and near-misses.
  for (const a of added) {
    out.push(enc(`${r.pick(PHRASES)}${a}${r.pick(CODE)}`));
    out.push(enc(`x${a}${a}${r.pick(added)} ${a.slice(0, -1)} <${a}>`));
  }
  // Long whitespace runs (each kind alone, then mixed), at text boundaries and inside text.
  for (const s of SPACES) {
    out.push(enc(s.repeat(r.range(50, 400))));
    out.push(enc(`a${s.repeat(r.range(2, 60))}b${s.repeat(3)}`));
  }
  out.push(enc(" ".repeat(5000)), enc(`x${" ".repeat(3000)}y`), enc("\n".repeat(2000)), enc(`${" \t".repeat(1500)}\n`));
  for (let i = 0; i < 200; ++i) out.push(enc(`${r.pick(PHRASES)}${whitespace(r.range(20, 300))}${r.pick(PHRASES)}`));
  // U+0085 and U+180E next to letters, spaces and newlines (the \s set differs between engines).
  for (let i = 0; i < 200; ++i) {
    const pieces = Array.from({ length: r.range(2, 8) }, () => r.pick(["\u0085", "\u180e", " ", "\n", "a", "Z", "中", "1", "!", "\u0085\u0085", " \u180e"]));
    out.push(enc(pieces.join("")));
  }
  // Digit runs of every length in several scripts.
  for (let n = 1; n <= 40; ++n) out.push(enc("7".repeat(n)), enc(`a${"1234567890".repeat(4).slice(0, n)}b`));
  for (let i = 0; i < 300; ++i) out.push(enc(digits()));
  // Ill-formed bytes inside text.
  for (let i = 0; i < 600; ++i) out.push(withBadBytes(Array.from({ length: r.range(1, 4) }, fragment).join("")));
  // Random mixtures fill up the rest.
  while (out.length < count) out.push(enc(Array.from({ length: r.range(1, 10) }, fragment).join("")));
  return out;
}
