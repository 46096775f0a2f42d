// DeepSeek pre-tokenizer splits by scanning code points; each regex alternative is a closed form.
#include "tokenizer/deepseek_split.h"

#include <oniguruma.h>

#include <cstdint>
#include <string>

#include "core/status.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace dsv4 {

const std::string_view kDeepSeekSplitPatterns[3] = {
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};

namespace {

// Class bits per code point.
enum : uint8_t {
  kL = 1,     // \p{L}
  kM = 2,     // \p{M}
  kN = 4,     // \p{N}
  kP = 8,     // \p{P}
  kS = 16,    // \p{S}
  kWs = 32,   // \s (Oniguruma's Unicode space ctype)
  kCrLf = 64, // [\r\n]
  kCjk = 128, // [一-龥぀-ゟ゠-ヿ] = U+4E00-9FA5, U+3040-309F, U+30A0-30FF
};

// Flat table over all code points, filled from the ranges Oniguruma itself matches \p{..} and \s
// with (ONIGENC_GET_CTYPE_CODE_RANGE), so this path and the regex path share one Unicode version.
class ClassTable {
 public:
  ClassTable() : bits_(0x110000, 0) {
    ensure_oniguruma();
    OnigEncoding enc = ONIG_ENCODING_UTF8;
    auto add_ctype = [&](int ctype, uint8_t bit) {
      OnigCodePoint sb_out = 0;
      const OnigCodePoint* ranges = nullptr;
      DSV4_CHECK(ONIGENC_GET_CTYPE_CODE_RANGE(enc, ctype, &sb_out, &ranges) == 0 && ranges != nullptr);
      // ranges[0] = number of pairs, then [lo, hi] pairs.
      for (OnigCodePoint k = 0; k < ranges[0]; ++k)
        for (OnigCodePoint c = ranges[1 + 2 * k]; c <= ranges[2 + 2 * k] && c < 0x110000; ++c) bits_[c] |= bit;
    };
    auto add_property = [&](std::string_view name, uint8_t bit) {
      auto* p = reinterpret_cast<OnigUChar*>(const_cast<char*>(name.data()));
      int ctype = ONIGENC_PROPERTY_NAME_TO_CTYPE(enc, p, p + name.size());
      DSV4_CHECK(ctype >= 0);
      add_ctype(ctype, bit);
    };
    add_property("L", kL);
    add_property("M", kM);
    add_property("N", kN);
    add_property("P", kP);
    add_property("S", kS);
    add_ctype(ONIGENC_CTYPE_SPACE, kWs);
    bits_['\r'] |= kCrLf;
    bits_['\n'] |= kCrLf;
    for (char32_t c = 0x4E00; c <= 0x9FA5; ++c) bits_[c] |= kCjk;
    for (char32_t c = 0x3040; c <= 0x30FF; ++c) bits_[c] |= kCjk;
  }
  uint8_t operator[](char32_t c) const { return bits_[c]; }

 private:
  std::vector<uint8_t> bits_;
};

const ClassTable& classes() {
  static const ClassTable t;
  return t;
}

bool ascii_punct(char32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
}
bool ascii_letter(char32_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

// The decoded text: code points, their classes, and byte offsets (offset[n] = size).
struct Decoded {
  std::vector<char32_t> cp;
  std::vector<uint8_t> cls;
  std::vector<uint32_t> offset;
};

struct Range {
  uint32_t begin, end;  // code point indices
};

// Appends the Isolated pieces of [a, b) given the matches (sorted, disjoint) found in it.
void isolate(Range r, const std::vector<Range>& matches, std::vector<Range>& out) {
  uint32_t prev = r.begin;
  for (const Range& m : matches) {
    if (m.begin > prev) out.push_back({prev, m.begin});
    out.push_back(m);
    prev = m.end;
  }
  if (prev < r.end) out.push_back({prev, r.end});
}

// p1 = \p{N}{1,3}: greedy, so each run of N splits into chunks of three from its left end.
void match_digits(const Decoded& d, Range r, std::vector<Range>& m) {
  for (uint32_t i = r.begin; i < r.end;) {
    if (!(d.cls[i] & kN)) { ++i; continue; }
    uint32_t j = i + 1;
    while (j < r.end && j < i + 3 && (d.cls[j] & kN)) ++j;
    m.push_back({i, j});
    i = j;
  }
}

// p2 = [CJK]+: maximal runs.
void match_cjk(const Decoded& d, Range r, std::vector<Range>& m) {
  for (uint32_t i = r.begin; i < r.end;) {
    if (!(d.cls[i] & kCjk)) { ++i; continue; }
    uint32_t j = i + 1;
    while (j < r.end && (d.cls[j] & kCjk)) ++j;
    m.push_back({i, j});
    i = j;
  }
}

// p3, alternative by alternative at each start p (leftmost-first: the first alternative that can
// match at the smallest p wins). With run(p, set) = the end of the maximal run of `set` from p:
//  A [punct][A-Za-z]+            : punct(p) and letter(p+1) -> [p, run(p+1, letter))
//  B [^\r\n L P S]?[L M]+        : X(p) and Y(p+1) -> [p, run(p+1, Y)); else Y(p) -> [p, run(p, Y)).
//                                  (X and Y overlap only in M; then both readings end alike.)
//  C ' '?[P S]+[\r\n]*           : ' ' then PS(p+1) -> q = run(p+1, PS); else PS(p) -> q = run(p, PS);
//                                  end = run(q, CRLF). (' ' is not P/S, so no other reading.)
//  D \s*[\r\n]+                  : \s* backtracks from q = run(p, \s) to the last CR/LF j in
//                                  [p, q), and [\r\n]+ then ends at j + 1 (nothing after j is CR/LF).
//  E \s+(?!\S)                   : q = run(p, \s); q at the piece end -> [p, q); else the char at q
//                                  is \S, so \s+ gives back one: [p, q - 1) when that is non-empty.
//  F \s+                         : [p, q).
void match_words(const Decoded& d, Range r, std::vector<Range>& m) {
  auto run = [&](uint32_t i, uint8_t set) {
    while (i < r.end && (d.cls[i] & set)) ++i;
    return i;
  };
  auto is_x = [&](uint32_t i) { return !(d.cls[i] & (kCrLf | kL | kP | kS)); };
  constexpr uint8_t kY = kL | kM, kPs = kP | kS;
  for (uint32_t p = r.begin; p < r.end;) {
    const char32_t c = d.cp[p];
    const uint8_t k = d.cls[p];
    const bool has_next = p + 1 < r.end;
    uint32_t end = p;
    if (ascii_punct(c) && has_next && ascii_letter(d.cp[p + 1])) {  // A
      end = p + 2;
      while (end < r.end && ascii_letter(d.cp[end])) ++end;
    } else if (is_x(p) && has_next && (d.cls[p + 1] & kY)) {  // B, with the optional char
      end = run(p + 1, kY);
    } else if (k & kY) {  // B, without it
      end = run(p, kY);
    } else if (c == ' ' && has_next && (d.cls[p + 1] & kPs)) {  // C, with the space
      end = run(run(p + 1, kPs), kCrLf);
    } else if (k & kPs) {  // C, without it
      end = run(run(p, kPs), kCrLf);
    } else if (k & kWs) {  // D, E, F
      uint32_t q = run(p, kWs);
      uint32_t last_crlf = q;
      for (uint32_t j = q; j-- > p;)
        if (d.cls[j] & kCrLf) { last_crlf = j; break; }
      if (last_crlf < q) end = last_crlf + 1;  // D
      else if (q == r.end) end = q;            // E at the piece end
      else if (q - 1 > p) end = q - 1;         // E, giving one back
      else end = q;                            // F
    }
    if (end > p) {
      m.push_back({p, end});
      p = end;
    } else {
      ++p;
    }
  }
}

}  // namespace

void deepseek_split(std::string_view text, std::vector<std::string_view>& pieces) {
  thread_local Decoded d;
  thread_local std::vector<Range> level1, level2, level3, matches;
  const ClassTable& table = classes();
  d.cp.clear();
  d.cls.clear();
  d.offset.clear();
  for (size_t i = 0; i < text.size();) {
    char32_t c = static_cast<uint8_t>(text[i]);
    size_t n = 1;
    if (c >= 0x80) {
      n = utf8::valid_multibyte_length(text, i);
      DSV4_CHECK(n > 0);  // callers pass valid UTF-8
      c = utf8::decode_at(text, i, n);
    }
    d.cp.push_back(c);
    d.cls.push_back(table[c]);
    d.offset.push_back(static_cast<uint32_t>(i));
    i += n;
  }
  d.offset.push_back(static_cast<uint32_t>(text.size()));
  const uint32_t n = static_cast<uint32_t>(d.cp.size());

  level1.clear();
  level2.clear();
  level3.clear();
  if (n == 0) {
    pieces.clear();
    return;
  }
  matches.clear();
  match_digits(d, {0, n}, matches);
  isolate({0, n}, matches, level1);
  for (Range r : level1) {
    matches.clear();
    match_cjk(d, r, matches);
    isolate(r, matches, level2);
  }
  for (Range r : level2) {
    matches.clear();
    match_words(d, r, matches);
    isolate(r, matches, level3);
  }
  pieces.clear();
  for (Range r : level3) pieces.push_back(text.substr(d.offset[r.begin], d.offset[r.end] - d.offset[r.begin]));
}

}  // namespace dsv4
