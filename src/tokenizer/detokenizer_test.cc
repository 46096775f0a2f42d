// Streaming detokenization: every split point of multi-byte and ill-formed sequences.
#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer/v41_tokenizer.h"

namespace dsv4 {
namespace {

const Tokenizer& v41() {
  static const Tokenizer t = *load_v41_tokenizer();
  return t;
}

// Unicode Standard, chapter 3, Table 3-8 ("Use of U+FFFD in UTF-8 Conversion"): the bytes
// 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 convert to a FFFD FFFD FFFD b FFFD c FFFD FFFD d.
const std::string kTable38In = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
const std::string kTable38Out = "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd";

// Well-formed text with 1-, 2-, 3- and 4-byte characters, a ZWJ emoji and a combining mark.
const std::string kMixed = "aé中🌍x👩‍💻e\u0301€\U0010FFFF";

TEST(Utf8, RepairMatchesUnicodeTable38) { EXPECT_EQ(utf8::repair(kTable38In), kTable38Out); }

TEST(Utf8, ValidityFollowsTable37) {
  EXPECT_TRUE(utf8::is_valid(kMixed));
  for (std::string bad : {"\xC0\x80", "\xC1\xBF", "\xE0\x9F\xBF", "\xED\xA0\x80", "\xF0\x8F\xBF\xBF", "\xF4\x90\x80\x80",
                          "\xF5\x80\x80\x80", "\x80", "\xE4\xBD"})
    EXPECT_FALSE(utf8::is_valid(bad)) << testing::PrintToString(bad);
}

// Feeds `bytes` cut at the given positions and returns everything emitted.
std::string stream_with_cuts(const std::string& bytes, const std::vector<size_t>& cuts) {
  Utf8Stream s;
  std::string out;
  size_t prev = 0;
  for (size_t c : cuts) {
    std::string piece = s.push(std::string_view(bytes).substr(prev, c - prev));
    EXPECT_TRUE(utf8::is_valid(piece));
    EXPECT_LE(s.held_bytes(), 3u);
    out += piece;
    prev = c;
  }
  out += s.push(std::string_view(bytes).substr(prev));
  return out + s.finish();
}

TEST(Utf8Stream, EveryOneAndTwoCutSplit) {
  for (const auto& [in, want] : {std::pair{kMixed, kMixed}, std::pair{kTable38In, kTable38Out}}) {
    for (size_t i = 0; i <= in.size(); ++i) {
      EXPECT_EQ(stream_with_cuts(in, {i}), want) << "cut " << i;
      for (size_t j = i; j <= in.size(); ++j) EXPECT_EQ(stream_with_cuts(in, {i, j}), want) << "cuts " << i << "," << j;
    }
  }
}

TEST(Utf8Stream, HoldsOnlyUnfinishedSequences) {
  Utf8Stream s;
  EXPECT_EQ(s.push("\xF0\x9F"), "");  // first half of U+1F30D
  EXPECT_EQ(s.held_bytes(), 2u);
  EXPECT_EQ(s.push("\x8C"), "");
  EXPECT_EQ(s.push("\x8D!"), "🌍!");
  EXPECT_EQ(s.push("\xE4\xBD"), "");
  EXPECT_EQ(s.push("A"), "\uFFFDA");  // E4 BD is one maximal subpart; known ill-formed at 'A'
  EXPECT_EQ(s.push("\xE0\x80"), "\uFFFD\uFFFD");  // E0 80 can never complete: emitted at once
  EXPECT_EQ(s.push("\xF0\x90\x80"), "");
  EXPECT_EQ(s.finish(), "\uFFFD");  // the unfinished tail at end of stream
}

// One token per byte: the detokenizer sees every split point of every character.
TEST(IncrementalDetokenizer, ByteTokensAtEverySplit) {
  for (const std::string& text : {kMixed, kTable38In}) {
    IncrementalDetokenizer d(v41());
    std::string out;
    for (char b : text) {
      auto id = v41().token_to_id(byte_level::encode(std::string(1, b)));
      ASSERT_TRUE(id.has_value());
      auto piece = d.push(*id);
      ASSERT_TRUE(piece.ok());
      EXPECT_TRUE(utf8::is_valid(*piece));
      out += *piece;
    }
    out += d.finish();
    EXPECT_EQ(out, text == kMixed ? kMixed : kTable38Out);
  }
}

TEST(IncrementalDetokenizer, SplitCharacterTokensAndSpecials) {
  // "🌍" is not one token: U+1F30D tokenizes into pieces that split the 4-byte character.
  std::string text = "<｜Assistant｜>Earth 🌍🌍 and 毕老师！<｜end▁of▁sentence｜>";
  std::vector<TokenId> ids = v41().encode(text);
  for (bool skip : {false, true}) {
    IncrementalDetokenizer d(v41(), skip);
    std::string out;
    size_t partial = 0;
    for (TokenId id : ids) {
      auto piece = d.push(id);
      ASSERT_TRUE(piece.ok());
      EXPECT_TRUE(utf8::is_valid(*piece));
      if (d.held_bytes() > 0) ++partial;
      out += *piece;
    }
    out += d.finish();
    EXPECT_GT(partial, 0u) << "the corpus should split at least one character across tokens";
    EXPECT_EQ(out, skip ? "<｜Assistant｜>Earth 🌍🌍 and 毕老师！" : text);  // EOS is special
  }
}

TEST(IncrementalDetokenizer, UnknownIdFailsWithoutConsuming) {
  IncrementalDetokenizer d(v41());
  auto first = d.push(*v41().token_to_id(byte_level::encode("\xE4")));
  ASSERT_TRUE(first.ok());
  auto bad = d.push(200000);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("200000"), std::string::npos);
  EXPECT_EQ(d.held_bytes(), 1u);
}

}  // namespace
}  // namespace dsv4
