// Seeded mutation fuzzing of the safetensors parser and the checkpoint index: no crash, no
// out-of-bounds read, and every outcome either a consistent header or a clean error.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/checkpoint.h"
#include "core/safetensors.h"
#include "core/safetensors_testing.h"
#include "core/safetensors_writer.h"

namespace dsv4 {
namespace {

using Bytes = std::vector<uint8_t>;

// Portable draws from std::mt19937_64 (its output sequence is fixed by the standard).
struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  uint64_t below(uint64_t n) { return n == 0 ? 0 : g() % n; }
  bool chance(int percent) { return below(100) < static_cast<uint64_t>(percent); }
};

// Valid starting points: writer output (padded and unpadded) and hand-built headers.
std::vector<Bytes> seeds() {
  std::vector<Bytes> out;
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  EXPECT_TRUE(w.add("layers.0.attn.wq_a.weight", DType::f8_e4m3, {4, 8}, testing::pattern_bytes(32, 1)).ok());
  EXPECT_TRUE(w.add("layers.0.attn.wq_a.scale", DType::f8_e8m0, {1, 1}, {127}).ok());
  EXPECT_TRUE(w.add("layers.0.ffn.experts.0.w1.weight", DType::i8, {2, 4}, testing::pattern_bytes(8, 2)).ok());
  EXPECT_TRUE(w.add("norm.weight", DType::bf16, {3}, testing::pattern_bytes(6, 3)).ok());
  EXPECT_TRUE(w.add("attn_sink", DType::f32, {}, testing::pattern_bytes(4, 4)).ok());
  EXPECT_TRUE(w.add("empty", DType::i64, {0, 3}, {}).ok());
  EXPECT_TRUE(w.add("tid2eid", DType::i64, {2}, testing::pattern_bytes(16, 5)).ok());
  for (int64_t align : {8, 1}) {
    SafetensorsWriteOptions o;
    o.header_alignment = align;
    auto b = w.serialize(o);
    EXPECT_TRUE(b.ok());
    out.push_back(*b);
  }
  out.push_back(testing::raw_safetensors(
      R"({"e":{"dtype":"F4","shape":[2,4],"data_offsets":[0,4]},"s":{"dtype":"U8","shape":[2,1],"data_offsets":[4,6]},"h":{"dtype":"F16","shape":[1],"data_offsets":[6,8]}})",
      testing::pattern_bytes(8, 6)));
  out.push_back(testing::raw_safetensors("{}"));
  return out;
}

// Replacement tokens for JSON splices: boundary numbers, dtype names, keys and structure.
const std::vector<std::string> kTokens = {
    "0", "1", "-1", "2", "7", "8", "1.5", "1e3", "-0", "255", "4294967296", "9223372036854775807",
    "9223372036854775808", "18446744073709551615", "4611686018427387904", "99999999999999999999999",
    "\"F4\"", "\"I8\"", "\"U8\"", "\"F8_E8M0\"", "\"F8_E4M3\"", "\"BF16\"", "\"I64\"", "\"F64\"", "\"Q\"",
    "\"dtype\"", "\"shape\"", "\"data_offsets\"", "\"__metadata__\"", "\"norm.weight\"", "\"\"",
    "\"\\u0000\"", "\"\\ud800\"", "\"\xff\"", "[", "]", "{", "}", ",", ":", "[]", "{}", "[0,0]", "[1,0]",
    "[0]", "null", "true", "false", " ", "[[[[[[[[[[[[[[[[[[[[", "\"a\":1",
};

// Token spans of a JSON text: maximal runs of digits/letters/signs, strings, or one punctuation.
std::vector<std::pair<size_t, size_t>> tokens(const std::string& s) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i + 1;
    if (s[i] == '"') {
      while (j < s.size() && s[j] != '"') j += (s[j] == '\\') ? 2 : 1;
      j = std::min(j + 1, s.size());
    } else if (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '-' || s[i] == '.') {
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '-' || s[j] == '.')) ++j;
    }
    out.emplace_back(i, j - i);
    i = j;
  }
  return out;
}

void set_length(Bytes& b, uint64_t n) {
  for (int i = 0; i < 8 && i < static_cast<int>(b.size()); ++i) b[i] = static_cast<uint8_t>(n >> (8 * i));
}

uint64_t header_length(const Bytes& b) {
  uint64_t n = 0;
  for (int i = 7; i >= 0 && b.size() >= 8; --i) n = (n << 8) | b[i];
  return n;
}

// One mutation of `b`; JSON edits keep the length field consistent most of the time so that
// they reach the JSON and validation logic rather than the length checks.
void mutate(Rng& r, Bytes& b) {
  const uint64_t n = b.size() >= 8 ? std::min<uint64_t>(header_length(b), b.size() - 8) : 0;
  switch (r.below(7)) {
    case 0: {  // bit flips, mostly inside the header
      int flips = 1 + static_cast<int>(r.below(4));
      for (int k = 0; k < flips && !b.empty(); ++k) {
        size_t pos = (r.chance(80) && n > 0) ? 8 + r.below(n) : r.below(b.size());
        b[pos] ^= static_cast<uint8_t>(1u << r.below(8));
      }
      break;
    }
    case 1:  // truncation
      b.resize(r.below(b.size() + 1));
      break;
    case 2: {  // length field changes
      const uint64_t choices[] = {0, 1, n - 1, n + 1, n + 8, b.size() - 8, b.size(), 100'000'000, 100'000'001,
                                  UINT64_MAX, uint64_t{1} << 63, r.g()};
      set_length(b, choices[r.below(std::size(choices))]);
      break;
    }
    case 3:
    case 4: {  // JSON token splice or deletion
      if (b.size() < 8 || n == 0) break;
      std::string h(b.begin() + 8, b.begin() + 8 + static_cast<int64_t>(n));
      Bytes data(b.begin() + 8 + static_cast<int64_t>(n), b.end());
      auto toks = tokens(h);
      auto [at, len] = toks[r.below(toks.size())];
      if (r.chance(80)) {
        h.replace(at, len, kTokens[r.below(kTokens.size())]);
      } else {
        h.erase(at, len);
      }
      if (r.chance(30) && !data.empty()) data.resize(r.below(data.size() + 1));
      b = testing::raw_safetensors(h, data, r.chance(90) ? UINT64_MAX : n);
      break;
    }
    case 5: {  // duplicate a span of the header (repeats keys, entries or digits)
      if (b.size() < 8 || n < 2) break;
      std::string h(b.begin() + 8, b.begin() + 8 + static_cast<int64_t>(n));
      Bytes data(b.begin() + 8 + static_cast<int64_t>(n), b.end());
      size_t at = r.below(h.size()), len = 1 + r.below(std::min<size_t>(h.size() - at, 64));
      h.insert(r.below(h.size() + 1), h.substr(at, len));
      b = testing::raw_safetensors(h, data);
      break;
    }
    case 6: {  // nudge one number by a small amount (reaches offset, shape and size checks)
      if (b.size() < 8 || n == 0) break;
      std::string h(b.begin() + 8, b.begin() + 8 + static_cast<int64_t>(n));
      Bytes data(b.begin() + 8 + static_cast<int64_t>(n), b.end());
      std::vector<std::pair<size_t, size_t>> nums;
      for (auto [at, len] : tokens(h))
        if (std::isdigit(static_cast<unsigned char>(h[at]))) nums.emplace_back(at, len);
      if (nums.empty()) break;
      auto [at, len] = nums[r.below(nums.size())];
      const int64_t base = std::strtoll(h.substr(at, len).c_str(), nullptr, 10);  // saturates
      int64_t v = base;
      if (__builtin_add_overflow(base, static_cast<int64_t>(r.below(5)) - 2, &v)) v = base;
      h.replace(at, len, std::to_string(v));
      b = testing::raw_safetensors(h, data);
      break;
    }
  }
}

// What an accepted header must satisfy, checked independently of the parser's own logic.
void check_consistent(const SafetensorsHeader& h, const Bytes& file) {
  ASSERT_EQ(h.data_offset, 8 + h.header_bytes);
  ASSERT_EQ(h.data_offset + h.data_size, static_cast<int64_t>(file.size()));
  ASSERT_LE(h.header_bytes, 100'000'000);
  int64_t pos = 0;
  std::set<std::string> names;
  uint64_t sum = 0;
  for (const auto& e : h.entries) {
    ASSERT_TRUE(names.insert(e.name).second) << e.name;
    ASSERT_EQ(e.begin, pos) << e.name;
    ASSERT_GE(e.end, e.begin);
    int64_t numel = 1;
    for (int64_t d : e.shape) {
      ASSERT_GE(d, 0);
      ASSERT_FALSE(__builtin_mul_overflow(numel, d, &numel)) << e.name;
    }
    ASSERT_EQ(numel * dtype_size(e.dtype), e.end - e.begin) << e.name;
    // Touch every byte so a sanitizer sees any read past the buffer.
    for (int64_t i = e.begin; i < e.end; ++i) sum += file[static_cast<size_t>(h.data_offset + i)];
    pos = e.end;
  }
  ASSERT_EQ(pos, h.data_size);
  (void)sum;
}

TEST(SafetensorsFuzz, SeededMutationsNeverCrashAndFailCleanly) {
  constexpr int kMutations = 20000;
  Rng r(0x5afe7e5);
  const auto base = seeds();
  int accepted = 0, refused = 0;
  for (int i = 0; i < kMutations; ++i) {
    Bytes b = base[r.below(base.size())];
    int rounds = 1 + static_cast<int>(r.below(3));
    for (int k = 0; k < rounds; ++k) mutate(r, b);
    b.shrink_to_fit();  // exact-size buffer: any over-read is a heap overflow a sanitizer reports
    auto h = parse_safetensors("fuzz.safetensors", b);
    if (h.ok()) {
      ++accepted;
      check_consistent(*h, b);
    } else {
      ++refused;
      const Status& s = h.status();
      ASSERT_EQ(s.message().rfind("fuzz.safetensors: ", 0), 0u) << s.message();
      ASSERT_TRUE(s.code() == StatusCode::data_loss || s.code() == StatusCode::out_of_range ||
                  s.code() == StatusCode::unimplemented)
          << s.to_string();
    }
    if (HasFatalFailure()) FAIL() << "mutation " << i;
  }
  // Both outcomes must be well represented, or the mutator is not exercising the parser.
  EXPECT_GT(accepted, kMutations / 200) << accepted;
  EXPECT_GT(refused, kMutations / 2) << refused;
}

// Every proper prefix of a valid file is refused (the data section must be covered exactly),
// from memory and from disk.
TEST(SafetensorsFuzz, EveryTruncationIsRefused) {
  testing::ScratchDir dir;
  const std::string path = dir.file("t.safetensors");
  for (const Bytes& full : seeds()) {
    ASSERT_TRUE(parse_safetensors("t", full).ok());
    for (size_t len = 0; len < full.size(); ++len) {
      Bytes cut(full.begin(), full.begin() + static_cast<int64_t>(len));
      auto h = parse_safetensors("t.safetensors", cut);
      ASSERT_FALSE(h.ok()) << "prefix of " << len << " bytes accepted";
      if (len % 13 == 0) {
        testing::write_bytes(path, cut);
        auto f = SafetensorsFile::open(path);
        ASSERT_FALSE(f.ok());
        ASSERT_EQ(f.status().message().rfind(path, 0), 0u) << f.status().message();
      }
    }
  }
}

// Mutated model.safetensors.index.json files over valid shards: ok or a clean error, never a crash.
TEST(SafetensorsFuzz, MutatedIndexFiles) {
  testing::ScratchDir dir;
  ShardedSafetensorsWriter sw(dir.path(), SafetensorsWriteOptions{8, 1 << 20, false});
  SafetensorsWriter a, b;
  ASSERT_TRUE(a.add("a.weight", DType::bf16, {2}, {1, 2, 3, 4}).ok());
  ASSERT_TRUE(b.add("b.weight", DType::u8, {1}, {5}).ok());
  ASSERT_TRUE(sw.write_shard("model-00001-of-00002.safetensors", a).ok());
  ASSERT_TRUE(sw.write_shard("model-00002-of-00002.safetensors", b).ok());
  ASSERT_TRUE(sw.finish().ok());
  const std::string index_path = dir.file("model.safetensors.index.json");
  auto orig = testing::read_bytes(index_path);
  const std::string text(orig.begin(), orig.end());
  Rng r(20261129);
  int ok = 0, refused = 0;
  for (int i = 0; i < 400; ++i) {
    std::string t = text;
    auto toks = tokens(t);
    int edits = 1 + static_cast<int>(r.below(3));
    for (int k = 0; k < edits; ++k) {
      toks = tokens(t);
      if (toks.empty()) break;
      auto [at, len] = toks[r.below(toks.size())];
      if (r.chance(75)) {
        t.replace(at, len, kTokens[r.below(kTokens.size())]);
      } else {
        t.erase(at, len);
      }
    }
    testing::write_text(index_path, t);
    auto ck = Checkpoint::open(dir.path());
    if (ck.ok()) {
      ++ok;
      ASSERT_EQ(ck->tensor_count(), 2);
    } else {
      ++refused;
      ASSERT_NE(ck.status().message().find(dir.path()), std::string::npos) << ck.status().message();
    }
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(refused, 200);
}

}  // namespace
}  // namespace dsv4
