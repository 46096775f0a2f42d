// The oracle with given embedding rows (an image's span): any pieces equal whole, a split snapshot taken mid-span
// resumes exactly; span rows are DEAD to Engram (history -1, gate 0) and route with bias_vl (logits change with it),
// while text rows never read bias_vl.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <map>

#include "backends/cpu/forward.h"
#include "backends/cpu/image_rows_testing.h"
#include "backends/cpu/oracle_testing.h"
#include "family/deepseek_v41/synthetic_weights.h"

namespace dsv4::cpu {
namespace {

using image_testing::Span;
constexpr int kStart = 6, kCount = 17, kLength = 34, kVocab = 512;  // span [6, 23) of a 34-token prompt

std::shared_ptr<const family::Model> model() {
  static std::shared_ptr<const family::Model> w = family::synthetic_weights(family::small_test_config(), 7, true);
  return w;
}

std::unique_ptr<Oracle> oracle(std::shared_ptr<const family::Model> m = model(), OracleOptions o = {}) {
  o.threads = 2;
  o.max_rollback = 16;
  auto r = Oracle::create(std::move(m), o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

Span span(uint32_t seed, bool image = true) {
  return Span{kStart, kCount, image_testing::lcg_rows(kCount, model()->plan.dim, seed), image};
}

// The prompt in pieces of `sizes` (each carrying its cut of the span); every row's logits. `at`: the stream.
std::vector<float> run(Oracle& o, const std::vector<int32_t>& tokens, const Span& s, const std::vector<int>& sizes,
                       int32_t* at = nullptr) {
  const int32_t stream = o.open_stream();
  if (at) *at = stream;
  std::vector<float> all;
  int64_t pos = 0;
  for (int n : sizes) {
    auto r = o.forward({image_testing::span_piece(stream, tokens, pos, n, s, o.config().dim)});
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return all;
    all.insert(all.end(), (*r)[0].logits.begin(), (*r)[0].logits.end());
    pos += n;
  }
  return all;
}

std::vector<int32_t> prompt(uint32_t seed) {
  std::vector<int32_t> t = oracle_testing::lcg_prompt(kLength, seed, kVocab);
  for (int i = kStart; i < kStart + kCount; ++i) t[i] = kVocab - 1;  // the span's token
  return t;
}

std::vector<float> rows_from(const std::vector<float>& logits, int64_t row) {
  return std::vector<float>(logits.begin() + row * kVocab, logits.end());
}

TEST(OracleImageRows, PiecesEqualWholeAndTheRowsMatter) {
  auto o = oracle();
  const auto t = prompt(3);
  const Span s = span(9);
  const auto whole = run(*o, t, s, {kLength});
  for (const std::vector<int>& sizes : std::vector<std::vector<int>>{
           {7, 27}, {6, 17, 11}, {10, 5, 9, 10}, {22, 12}, {3, 4, 5, 6, 7, 9}, std::vector<int>(kLength, 1)})
    EXPECT_EQ(run(*o, t, s, sizes), whole) << "a split of " << sizes.size() << " pieces";
  // Other values, the flag off, or the tokens' own embedding change the logits after the span.
  const int64_t after = kStart + kCount;
  EXPECT_NE(rows_from(run(*o, t, span(10), {kLength}), after), rows_from(whole, after));
  EXPECT_NE(rows_from(run(*o, t, span(9, false), {kLength}), after), rows_from(whole, after));
  EXPECT_NE(rows_from(oracle_testing::run_pieces(*o, t, {kLength}), after), rows_from(whole, after));
}

TEST(OracleImageRows, SnapshotMidSpanResumesExactly) {
  auto o = oracle();
  const auto t = prompt(4);
  const Span s = span(11);
  const auto whole = run(*o, t, s, {kLength});
  // 13 rows in (mid-span), a split snapshot into a fresh stream, then the rest (the span's tail first).
  int32_t first = 0;
  run(*o, t, s, {13}, &first);
  auto parts = o->snapshot_parts(first, 0);
  ASSERT_TRUE(parts.ok());
  // The token history (the first row table) holds DEAD (-1) at the span's positions, compressed ids elsewhere.
  ASSERT_EQ(parts->rows[0].size(), 13u * 8);
  for (int p = 0; p < 13; ++p) {
    int64_t id = 0;
    std::memcpy(&id, parts->rows[0].data() + p * 8, 8);
    EXPECT_EQ(id == -1, p >= kStart) << p;
  }
  const int32_t second = o->open_stream();
  std::vector<std::vector<std::span<const uint8_t>>> tables;
  for (const auto& r : parts->rows) tables.push_back({std::span<const uint8_t>(r)});
  ASSERT_TRUE(o->restore_parts(second, parts->bounded, tables).ok());
  auto r = o->forward({image_testing::span_piece(second, t, 13, kLength - 13, s, o->config().dim)});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0].logits, rows_from(whole, 13));
}

TEST(OracleImageRows, EngramGateIsZeroOnSpanRows) {
  // The Engram layers' output equals their input on span rows (gate 0: h + 0 * value, already bf16) and differs on
  // text rows.
  OracleOptions opt;
  std::map<int, std::vector<float>> before, after;
  opt.layer_probe = [&](int layer, const std::vector<float>& h) { before[layer + 1] = h; };
  opt.op_probe = [&](int layer, const char* op, const std::vector<float>& v) {
    if (std::string(op) == "engram") after[layer] = v;
  };
  auto o = oracle(model(), opt);
  run(*o, prompt(5), span(12), {kLength});
  const family::ModelPlan& cfg = o->config();
  const int64_t width = cfg.hc_mult * cfg.dim;
  ASSERT_FALSE(cfg.engram_layers.empty());
  for (int l : cfg.engram_layers) {
    ASSERT_TRUE(before.count(l) && after.count(l)) << l;
    for (int r = 0; r < kLength; ++r) {
      const bool same = std::equal(before[l].begin() + r * width, before[l].begin() + (r + 1) * width,
                                   after[l].begin() + r * width);
      EXPECT_EQ(same, r >= kStart && r < kStart + kCount) << "layer " << l << " row " << r;
    }
  }
}

TEST(OracleImageRows, SpanRowsRouteWithBiasVlAndTextRowsNeverReadIt) {
  const std::vector<float> skewed = image_testing::skewed_bias(model()->plan.n_experts);
  const auto t = prompt(6);
  const Span s = span(13);
  const auto base = run(*oracle(), t, s, {kLength});
  // The skewed bias_vl changes the logits of the span's rows and every row after them, not those before.
  const auto routed = run(*oracle(image_testing::with_bias_vl(model(), skewed)), t, s, {kLength});
  EXPECT_EQ(std::vector<float>(routed.begin(), routed.begin() + kStart * kVocab),
            std::vector<float>(base.begin(), base.begin() + kStart * kVocab));
  EXPECT_NE(rows_from(routed, kStart), rows_from(base, kStart));
  // Text rows never read bias_vl: under the skewed one (which moved the span's rows above) and under NaN, a text
  // prompt and the same span fed with the flag off give the checkpoint's bits.
  const std::vector<float> nan(skewed.size(), std::numeric_limits<float>::quiet_NaN());
  const auto text = oracle_testing::run_pieces(*oracle(), t, {kLength});
  const auto unflagged = run(*oracle(), t, span(13, false), {kLength});
  for (const auto& poison : {skewed, nan}) {
    auto poisoned = oracle(image_testing::with_bias_vl(model(), poison));
    EXPECT_EQ(oracle_testing::run_pieces(*poisoned, t, {kLength}), text);
    EXPECT_EQ(run(*poisoned, t, span(13, false), {kLength}), unflagged);
  }
}

}  // namespace
}  // namespace dsv4::cpu
