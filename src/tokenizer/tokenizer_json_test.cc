// Loading small hand-written tokenizer.json files: merge order rules and errors that name the problem.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {
namespace {

using nlohmann::json;

// A byte-level BPE over all 256 byte symbols (ids 0..255 in byte order) plus `extra` entries.
json tiny(const std::vector<std::string>& extra, const json& merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::encode(std::string(1, static_cast<char>(b)))] = b;
  int next = 256;
  for (const auto& e : extra) vocab[e] = next++;
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array({json{{"id", 300}, {"content", "<s>"}, {"special", true}, {"normalized", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", json{{"type", "Sequence"},
                             {"pretokenizers", json::array({json{{"type", "Split"},
                                                                 {"pattern", {{"Regex", "\\s+|\\S+"}}},
                                                                 {"behavior", "Isolated"},
                                                                 {"invert", false}},
                                                            json{{"type", "ByteLevel"},
                                                                 {"add_prefix_space", false},
                                                                 {"use_regex", false}}})}}},
      {"post_processor", nullptr},
      {"decoder", json{{"type", "ByteLevel"}}},
      {"model", json{{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
  };
}

std::string load_error(const json& j) {
  auto t = Tokenizer::from_json(j.dump());
  EXPECT_FALSE(t.ok());
  return t.ok() ? std::string() : t.status().message();
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "message: " << (haystack)

TEST(TinyTokenizer, MergesByRankThenLeftmost) {
  // Ranks: "b c"=0 before "a b"=1, so "abc" -> a + bc (not ab + c); "aaa" with only "a a" merges
  // the leftmost pair first: aa + a. Hand-derived from the merge rule of tokenizers Word::merge_all.
  auto t = Tokenizer::from_json(tiny({"bc", "ab", "aa"}, json::array({"b c", "a b", "a a"})).dump());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->encode("abc"), (std::vector<TokenId>{'a', 256}));
  EXPECT_EQ(t->encode("aaa"), (std::vector<TokenId>{258, 'a'}));
  EXPECT_EQ(t->encode("aaaa"), (std::vector<TokenId>{258, 258}));
  EXPECT_EQ(t->encode("<s>ab c"), (std::vector<TokenId>{300, 257, ' ', 'c'}));
}

TEST(TinyTokenizer, MergePairsMayBeArrays) {
  auto t = Tokenizer::from_json(tiny({"ab"}, json::array({json::array({"a", "b"})})).dump());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->encode("ab"), (std::vector<TokenId>{256}));
}

TEST(TokenizerJson, ErrorsNameTheProblem) {
  EXPECT_CONTAINS(Tokenizer::from_json("{\"model\": ").status().message(), "not valid JSON");
  json j = tiny({}, json::array());
  j.erase("model");
  EXPECT_CONTAINS(load_error(j), "missing \"model\"");

  j = tiny({}, json::array());
  j["model"]["type"] = "WordPiece";
  EXPECT_CONTAINS(load_error(j), "\"WordPiece\" is not supported");

  j = tiny({"ab"}, json::array({"a b", "a zz"}));
  EXPECT_CONTAINS(load_error(j), "merges[1] names \"zz\"");

  j = tiny({"ab"}, json::array({"a b c"}));
  EXPECT_CONTAINS(load_error(j), "merges[0]");

  j = tiny({}, json::array({"a b"}));
  EXPECT_CONTAINS(load_error(j), "merged token \"ab\" is not in the vocab");

  j = tiny({}, json::array());
  j["model"]["vocab"].erase("A");
  EXPECT_CONTAINS(load_error(j), "byte 0x41");

  j = tiny({}, json::array());
  j["model"]["byte_fallback"] = true;
  EXPECT_CONTAINS(load_error(j), "byte_fallback");

  j = tiny({}, json::array());
  j["added_tokens"][0].erase("content");
  EXPECT_CONTAINS(load_error(j), "added_tokens[0]: missing string \"content\"");

  j = tiny({}, json::array());
  j["added_tokens"].push_back(json{{"id", 300}, {"content", "<t>"}});
  EXPECT_CONTAINS(load_error(j), "added_tokens[1]: id 300 is already used by \"<s>\"");

  j = tiny({}, json::array());
  j["added_tokens"][0]["id"] = 65;
  EXPECT_CONTAINS(load_error(j), "id 65 which the vocab gives to \"A\"");

  j = tiny({}, json::array());
  j["pre_tokenizer"]["pretokenizers"][0] = json{{"type", "Whitespace"}};
  EXPECT_CONTAINS(load_error(j), "pre_tokenizer type \"Whitespace\" is not supported");

  j = tiny({}, json::array());
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  EXPECT_CONTAINS(load_error(j), "pre_tokenizer[0] Split: regex /(unclosed/ does not compile");

  j = tiny({}, json::array());
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  EXPECT_CONTAINS(load_error(j), "unknown behavior \"Sideways\"");

  j = tiny({}, json::array());
  j["pre_tokenizer"] = json{{"type", "Split"}, {"pattern", {{"Regex", "x"}}}, {"behavior", "Isolated"}};
  EXPECT_CONTAINS(load_error(j), "must end in ByteLevel");

  j = tiny({}, json::array());
  j["decoder"] = nullptr;
  EXPECT_CONTAINS(load_error(j), "decoder null is not supported");

  j = tiny({}, json::array());
  j["normalizer"] = json{{"type", "Precompiled"}};
  EXPECT_CONTAINS(load_error(j), "normalizer type \"Precompiled\" is not supported");

  auto missing = Tokenizer::from_json_file("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::not_found);
  EXPECT_CONTAINS(missing.status().message(), "/nonexistent/tokenizer.json");
}

}  // namespace
}  // namespace dsv4
