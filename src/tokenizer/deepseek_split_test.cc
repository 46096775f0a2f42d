// The hand-written DeepSeek matcher against Oniguruma running the same three patterns.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer/v41_tokenizer.h"

namespace dsv4 {
namespace {

struct Both {
  PreTokenizer fast, regex;
};

const Both& both() {
  static const Both b = [] {
    auto root = nlohmann::json::parse(v41_tokenizer_json());
    auto fast = PreTokenizer::from_json(root["pre_tokenizer"]);
    auto regex = PreTokenizer::from_json(root["pre_tokenizer"], /*regex_only=*/true);
    EXPECT_TRUE(fast.ok() && regex.ok());
    return Both{*fast, *regex};
  }();
  return b;
}

std::vector<std::string> split(const PreTokenizer& p, std::string_view text) {
  std::vector<std::string_view> pieces;
  std::deque<std::string> storage;
  p.split(text, pieces, storage);
  return {pieces.begin(), pieces.end()};
}

TEST(DeepSeekSplit, UsedForTheV41Tokenizer) {
  EXPECT_TRUE(both().fast.uses_deepseek_matcher());
  EXPECT_FALSE(both().regex.uses_deepseek_matcher());
}

// Characters at every class boundary the patterns care about, plus code points from anywhere
// (both paths read Oniguruma's tables, so unassigned and private-use code points are fair game).
char32_t random_char(std::mt19937& rng) {
  static const std::vector<char32_t> tricky = {
      ' ', '\t', '\n', '\r', 0x0B, 0x0C, 0x1C, 0x1F, 0x85, 0xA0, 0x1680, 0x180E, 0x2000, 0x200A, 0x200B, 0x2028,
      0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF, 0x300, 0x301, 0x36F, 0x20D0, 0xE31, 0x93F, '0', '7', 0x660, 0xFF11,
      0xB2, 0xBD, 0x2163, 0x4DFF, 0x4E00, 0x9FA5, 0x9FA6, 0x303F, 0x3040, 0x3041, 0x309F, 0x30A0, 0x30FF, 0x3100,
      'a', 'Z', 0xE9, 0x416, 0x3B1, 0xAC00, 0x1100, '!', '"', '\'', '-', '.', '@', '[', '\\', '`', '{', '~', '$',
      '^', '+', '<', 0xA1, 0xBF, 0xD7, 0x2014, 0x2026, 0x20AC, 0x2211, 0x1F30D, 0x200D, 0xFE0F, 0x1F3FD, 0xFF01,
      0x3001, 0x3002, 0xFF5C, 0x2581, 0xFFFD, 0x10FFFF, 0xE000};
  switch (rng() % 4) {
    case 0: {
      char32_t c;
      do c = rng() % 0x110000; while (c >= 0xD800 && c <= 0xDFFF);
      return c;
    }
    case 1: return 0x20 + rng() % 0x5F;
    default: return tricky[rng() % tricky.size()];
  }
}

TEST(DeepSeekSplit, AgreesWithOnigurumaOnRandomStrings) {
  std::mt19937 rng(4141);
  for (int n = 0; n < 60000; ++n) {
    std::string text;
    int len = static_cast<int>(rng() % 24);
    for (int i = 0; i < len; ++i) {
      char32_t c = random_char(rng);
      int repeat = rng() % 8 == 0 ? 1 + rng() % 6 : 1;  // runs: digits, spaces, CJK
      for (int r = 0; r < repeat; ++r) utf8::append(text, c);
    }
    ASSERT_EQ(split(both().fast, text), split(both().regex, text)) << testing::PrintToString(text);
  }
}

TEST(DeepSeekSplit, AgreesOnEveryCodePointAlone) {
  // Each code point alone and between a letter and a space: the class table must match \p{..}/\s.
  for (char32_t c = 0; c < 0x110000; c += (c < 0x32000 ? 1 : 61)) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    std::string text = "a";
    utf8::append(text, c);
    text += " \n";
    utf8::append(text, c);
    utf8::append(text, c);
    ASSERT_EQ(split(both().fast, text), split(both().regex, text)) << "U+" << std::hex << uint32_t(c);
  }
}

}  // namespace
}  // namespace dsv4
