// Engram token map: the V4.1 count and ids of tokenizer-and-chat.md §3.3/§4.2, normalizer cases, JSON I/O.
#include "tokenizer/engram_token_map.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tokenizer/v41_tokenizer.h"

namespace dsv4 {
namespace {

const EngramTokenMap& v41_map() {
  static const EngramTokenMap map = [] {
    auto tok = load_v41_tokenizer();
    DSV4_CHECK(tok.ok());
    auto m = build_engram_token_map(*tok, 2);
    DSV4_CHECK(m.ok());
    return *m;
  }();
  return map;
}

std::string sha256_of_file(const std::string& path) {
  // coreutils sha256sum: an implementation independent of the code under test.
  FILE* p = popen(("sha256sum '" + path + "'").c_str(), "r");
  if (!p) return "";
  char buf[128] = {};
  const size_t n = fread(buf, 1, 64, p);
  pclose(p);
  return std::string(buf, n);
}

TEST(EngramNormalize, ChainSemantics) {
  // Hangul syllable: NFD decomposes algorithmically into conjoining jamo (category Lo, kept).
  EXPECT_EQ(engram_normalize("가"), "\u1100\u1161");
  EXPECT_EQ(engram_normalize(" 가"), "\u1100\u1161");
  // Accents and every category M go, including spacing marks (Devanagari vowel sign AA, Mc).
  EXPECT_EQ(engram_normalize("Éte\u0301"), "ete");
  EXPECT_EQ(engram_normalize("\u0915\u093e"), "\u0915");
  // NFD splits U+0130 into I + U+0307 before the mark is stripped; lowercase is per code point,
  // so a word-final capital sigma becomes U+03C3, not the final form U+03C2.
  EXPECT_EQ(engram_normalize("\u0130"), "i");
  EXPECT_EQ(engram_normalize("\u039f\u03a3"), "\u03bf\u03c3");
  // NFKC compatibility folding: fullwidth letters, ligatures.
  EXPECT_EQ(engram_normalize("\uff21\ufb01"), "afi");
  // Whitespace: runs of [ \t\r\n] collapse, the ends are trimmed, a lone space survives.
  EXPECT_EQ(engram_normalize("  The\t\n cat  "), "the cat");
  EXPECT_EQ(engram_normalize(" "), " ");
  EXPECT_EQ(engram_normalize("\n\n"), " ");
  EXPECT_EQ(engram_normalize("\u3000x\u00a0"), "x");  // NFKC makes both ends a plain space
  EXPECT_EQ(engram_normalize("\u0301"), "");
}

// tokenizer-and-chat.md §3.3: the V3 vocabulary plus the V4.1 added tokens give the config's
// engram_compressed_vocab_size 99,092; §3.3/§4.2 list reconstructed compressed ids.
TEST(EngramTokenMap, V41CountAndDocumentedIds) {
  const EngramTokenMap& m = v41_map();
  EXPECT_EQ(m.vocab_size, 129280);
  EXPECT_EQ(m.compressed_vocab_size, 99092);
  EXPECT_EQ(m.pad_id, 2);
  const std::pair<int32_t, int32_t> cases[] = {
      {0, 0},          {1, 1},          {2, 2},         {19923, 15844},  {14, 14},
      {1026, 851},     {6397, 5327},    {6751, 5618},   {14465, 5618},   {15251, 12266},
      {35, 35},        {67, 35},        {270, 237},     {128799, 98611}, {128803, 98615},
      {128804, 98616}, {128821, 98633}, {128822, 98634}, {128825, 98637}, {129264, 99076},
      {128000, 97812}, {129279, 99091},
  };
  for (auto [raw, compressed] : cases) EXPECT_EQ(m.token_map[raw], compressed) << "raw id " << raw;
  // 129,280 - 99,092 = 30,188 raw ids reuse an earlier compressed id.
  int32_t reused = 0, next = 0;
  for (int32_t c : m.token_map) {
    if (c < next) ++reused;
    else ++next;
  }
  EXPECT_EQ(reused, 30188);
}

TEST(EngramTokenMap, V41RawKeyedIdsAndDigest) {
  auto tok = load_v41_tokenizer();
  ASSERT_TRUE(tok.ok());
  // §3.2: 1,484 ids decode to text with U+FFFD and are keyed by their raw spelling.
  int32_t raw_keyed = 0;
  for (int32_t id = 0; id < tok->vocab_size(); ++id) {
    const TokenId one[1] = {id};
    auto text = tok->decode(one);
    ASSERT_TRUE(text.ok());
    raw_keyed += text->find("\xEF\xBF\xBD") != std::string::npos;
  }
  EXPECT_EQ(raw_keyed, 1484);
  // §3.3: sha256 of the reconstructed map as little-endian u32[129280].
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("engram_map_" + std::to_string(::getpid()) + ".u32")).string();
  {
    std::ofstream out(path, std::ios::binary);
    for (int32_t c : v41_map().token_map) {
      const uint32_t v = static_cast<uint32_t>(c);
      const unsigned char le[4] = {static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8),
                                   static_cast<unsigned char>(v >> 16), static_cast<unsigned char>(v >> 24)};
      out.write(reinterpret_cast<const char*>(le), 4);
    }
  }
  EXPECT_EQ(sha256_of_file(path), "c60a86322ec17b4142bfef3c57a8d81fb428550cdf487f88a4320cb59fe46481");
  std::filesystem::remove(path);
}

TEST(EngramTokenMap, JsonRoundTripAndRefusals) {
  const EngramTokenMap& m = v41_map();
  auto back = parse_engram_token_map_json(engram_token_map_to_json(m));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->token_map, m.token_map);
  EXPECT_EQ(back->compressed_vocab_size, 99092);
  EXPECT_TRUE(check_engram_token_map(*back, 129280, 99092, 2).ok());
  const Status wrong = check_engram_token_map(*back, 129280, 99090, 2);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("99092"), std::string::npos);
  EXPECT_NE(wrong.message().find("99090"), std::string::npos);
  EXPECT_FALSE(check_engram_token_map(*back, 129281, 99092, 2).ok());

  EXPECT_TRUE(parse_engram_token_map_json(
                  R"({"vocab_size": 4, "compressed_vocab_size": 3, "pad_id": 2, "token_map": [0, 1, 0, 2]})")
                  .ok());
  // The synthetic-checkpoint shape and a bare array: counts come from the array.
  auto synth = parse_engram_token_map_json(R"({"source": "x", "token_map": [0, 1, 2, 1]})");
  ASSERT_TRUE(synth.ok());
  EXPECT_EQ(synth->compressed_vocab_size, 3);
  EXPECT_EQ(synth->pad_id, -1);
  EXPECT_TRUE(check_engram_token_map(*synth, 4, 3, 2).ok());
  EXPECT_FALSE(check_engram_token_map(*synth, 4, 4, 2).ok());
  EXPECT_TRUE(parse_engram_token_map_json("[0, 0, 1]").ok());
  // A stated size need not be reached (a random synthetic map may miss its last id); the stated size is kept, since the
  // hash multipliers derive from it.
  auto unused_last = parse_engram_token_map_json(
      R"({"vocab_size": 3, "compressed_vocab_size": 3, "pad_id": 0, "token_map": [0, 1, 1]})");
  ASSERT_TRUE(unused_last.ok());
  EXPECT_EQ(unused_last->compressed_vocab_size, 3);
  for (const char* bad : {
           R"({"vocab_size": 4, "compressed_vocab_size": 3, "pad_id": 2, "token_map": [0, 1, 0]})",
           R"({"vocab_size": 2, "compressed_vocab_size": 2, "pad_id": 0, "token_map": [0, 5]})",
           R"({"vocab_size": 2, "compressed_vocab_size": 2, "pad_id": 7, "token_map": [0, 1]})",
           R"({"vocab_size": 2, "token_map": [0, -1]})",
           R"({"token_map": {"a": 1}})",
           "\"text\"",
       })
    EXPECT_FALSE(parse_engram_token_map_json(bad).ok()) << bad;
}

TEST(EngramTokenMap, CheckpointDirectoryPrefersTheFile) {
  const auto dir = std::filesystem::temp_directory_path() / ("engram_dir_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto tok = load_v41_tokenizer();
  ASSERT_TRUE(tok.ok());
  // No file: derived from the tokenizer; no tokenizer either: a clear error.
  auto derived = load_engram_token_map(dir.string(), &*tok, 129280, 99092, 2);
  ASSERT_TRUE(derived.ok()) << derived.status().to_string();
  auto none = load_engram_token_map(dir.string(), nullptr, 129280, 99092, 2);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("engram_token_map.json"), std::string::npos);
  // A file is used without a tokenizer, and refused when its count disagrees with the config.
  const std::string file = (dir / "engram_token_map.json").string();
  ASSERT_TRUE(write_engram_token_map_file(file, *derived).ok());
  auto from_file = load_engram_token_map(dir.string(), nullptr, 129280, 99092, 2);
  ASSERT_TRUE(from_file.ok());
  EXPECT_EQ(from_file->token_map, derived->token_map);
  auto mismatch = load_engram_token_map(dir.string(), nullptr, 129280, 12345, 2);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("engram_compressed_vocab_size is 12345"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dsv4
