// The CUDA forward with given embedding rows (an image's span) on a preset (tiny by default, DSV4_GPU_PRESET): pieces
// == whole, a stream beside others == alone and a split snapshot taken mid-span == continuing, bit for bit; the
// history holds DEAD at span positions; span rows are left unchanged by Engram (gate 0) and route with bias_vl (the
// logits change with it) while text rows never read it; the graph path after an image prompt equals eager; and the
// whole-model gate against the CPU oracle on a prompt with a span (gate weights).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <map>

#include "backends/cpu/forward.h"
#include "backends/cpu/gate.h"
#include "backends/cpu/image_rows_testing.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "backends/cuda/forward/forward.h"
#include "family/deepseek_v41/preset.h"
#include "forward_testing.h"

namespace dsv4::cuda {
namespace {

using namespace gpu_testing;
using cpu::image_testing::Span;
using engine::Piece;

constexpr int64_t kStart = 40, kCount = 150, kLength = 230;  // the span crosses the window and compressor groups

std::shared_ptr<const family::Model> weights(family::WeightProfile profile = family::WeightProfile::random) {
  static std::map<family::WeightProfile, std::shared_ptr<const family::Model>> w;
  if (!w[profile]) {
    const family::Config c = family::preset_config(*family::parse_preset(preset_name()), family::Variant::v41);
    w[profile] = profile == family::WeightProfile::gate ? family::synthetic_weights(c, cpu::gate::kSeed, false, profile)
                                                     : family::synthetic_weights(c, 1, true);
  }
  return w[profile];
}

std::unique_ptr<Forward> cuda_forward(std::shared_ptr<const family::Model> m) {
  auto up = ModelDevice::upload(std::move(m), ModelDeviceOptions{});
  EXPECT_TRUE(up.ok()) << up.status().to_string();
  if (!up.ok()) return nullptr;
  ForwardOptions o;
  o.max_context = 4096;
  o.max_rollback = 16;
  o.max_call_rows = 512;
  auto f = Forward::create(std::shared_ptr<const ModelDevice>(std::move(*up)), o);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? std::move(*f) : nullptr;
}

std::vector<int32_t> image_prompt(int salt) {
  std::vector<int32_t> t = prompt(static_cast<int>(kLength), salt);
  for (int64_t i = kStart; i < kStart + kCount; ++i) t[i] = 129264;
  return t;
}

Span span(uint32_t seed, bool image = true) {
  return Span{kStart, kCount, cpu::image_testing::lcg_rows(kCount, weights()->plan.dim, seed), image};
}

// The prompt in pieces of `sizes` on a fresh stream of `f` (the CUDA forward or the oracle), carrying `spans`; every
// row's logits. `at`: the stream.
template <typename F>
std::vector<float> run_spans(F& f, const std::vector<int32_t>& t, const std::vector<const Span*>& spans,
                             const std::vector<int64_t>& sizes, int64_t dim, int32_t* at = nullptr) {
  auto opened = f.open_stream();
  int32_t stream;
  if constexpr (requires { opened.value(); }) {
    EXPECT_TRUE(opened.ok());
    stream = opened.value();
  } else {
    stream = opened;
  }
  if (at) *at = stream;
  std::vector<float> all;
  int64_t pos = 0;
  for (int64_t n : sizes) {
    auto r = f.forward({cpu::image_testing::spans_piece(stream, t, pos, n, spans, dim)});
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return {};
    all.insert(all.end(), (*r)[0].logits.begin(), (*r)[0].logits.end());
    pos += n;
  }
  return all;
}
std::vector<float> run(Forward& f, const std::vector<int32_t>& t, const Span& s, const std::vector<int64_t>& sizes,
                       int32_t* at = nullptr) {
  return run_spans(f, t, {&s}, sizes, f.config().dim, at);
}

// The whole-model gate of `backend` (every row's logits of the prompt fed whole) against the oracle's ref32 and ref64
// on the same prompt: NRMS(backend, ref64) <= 1.05 NRMS(ref32, ref64) and top-1 on every row.
void expect_gate(const std::shared_ptr<const family::Model>& w, const std::vector<int32_t>& t,
                 const std::vector<const Span*>& spans, const std::vector<float>& backend, const char* what) {
  auto oracle_logits = [&](cpu::Precision p) {
    cpu::OracleOptions o;
    o.precision = p;
    auto oracle = std::move(cpu::Oracle::create(w, o)).value();
    return run_spans(*oracle, t, spans, {static_cast<int64_t>(t.size())}, w->plan.dim);
  };
  const auto r32 = oracle_logits(cpu::Precision::ref32), r64 = oracle_logits(cpu::Precision::ref64);
  cpu::gate::Verdict v;
  v.floor.add(r32, r64, w->config.vocab_size);
  v.backend.add(backend, r64, w->config.vocab_size);
  std::printf("%s: %s\n", what, v.summary().c_str());
  EXPECT_TRUE(v.pass()) << v.summary();
}

std::vector<float> rows_from(const std::vector<float>& logits, int64_t row) {
  const int64_t V = weights()->config.vocab_size;
  return std::vector<float>(logits.begin() + std::min<int64_t>(row * V, logits.size()), logits.end());
}

TEST(CudaImageRows, PiecesEqualWholeAndTheRowsMatter) {
  auto f = cuda_forward(weights());
  ASSERT_TRUE(f);
  const auto t = image_prompt(1);
  const Span s = span(3);
  const auto whole = run(*f, t, s, {kLength});
  for (const std::vector<int64_t>& sizes : std::vector<std::vector<int64_t>>{
           {41, 189}, {40, 150, 40}, {13, 1, 130, 7, 1, 78}, {100, 100, 30}})
    EXPECT_TRUE(run(*f, t, s, sizes) == whole) << "a split of " << sizes.size() << " pieces differs";
  const int64_t after = kStart + kCount;
  EXPECT_NE(rows_from(run(*f, t, span(4), {kLength}), after), rows_from(whole, after));
  EXPECT_NE(rows_from(run(*f, t, span(3, false), {kLength}), after), rows_from(whole, after));
}

TEST(CudaImageRows, StreamInBatchEqualsAlone) {
  auto f = cuda_forward(weights());
  ASSERT_TRUE(f);
  const auto t = image_prompt(2);
  const Span s = span(5);
  const auto alone = run(*f, t, s, {kLength});
  // The image prompt in two pieces, each beside a text prompt piece and a decode row of other streams.
  const auto b = prompt(90, 8);
  auto sa = *f->open_stream(), sb = *f->open_stream(), sc = *f->open_stream();
  ASSERT_TRUE(f->forward({Piece{sc, prompt(5, 9), {}, {}}}).ok());
  const int64_t V = weights()->config.vocab_size;
  auto r1 = f->forward({Piece{sb, std::vector<int32_t>(b.begin(), b.begin() + 60), {59}, {}},
                        cpu::image_testing::span_piece(sa, t, 0, 100, s, f->config().dim), Piece{sc, {77}, {0}, {}}});
  ASSERT_TRUE(r1.ok()) << r1.status().to_string();
  auto r2 = f->forward({cpu::image_testing::span_piece(sa, t, 100, kLength - 100, s, f->config().dim),
                        Piece{sb, std::vector<int32_t>(b.begin() + 60, b.end()), {29}, {}}});
  ASSERT_TRUE(r2.ok()) << r2.status().to_string();
  std::vector<float> batched = (*r1)[1].logits;
  batched.insert(batched.end(), (*r2)[0].logits.begin(), (*r2)[0].logits.end());
  ASSERT_EQ(batched.size(), static_cast<size_t>(kLength * V));
  EXPECT_TRUE(batched == alone) << "batched != alone";
}

TEST(CudaImageRows, SplitSnapshotMidSpanResumesAndKeepsDeadHistory) {
  auto f = cuda_forward(weights());
  ASSERT_TRUE(f);
  const auto t = image_prompt(3);
  const Span s = span(6);
  const auto whole = run(*f, t, s, {kLength});
  int32_t first = 0;
  run(*f, t, s, {100}, &first);  // mid-span
  auto parts = f->snapshot_parts(first, 0);
  ASSERT_TRUE(parts.ok()) << parts.status().to_string();
  ASSERT_EQ(parts->rows[0].size(), 100u * 8);  // the token history, first of the row tables
  for (int64_t p = 0; p < 100; ++p) {
    int64_t id = 0;
    std::memcpy(&id, parts->rows[0].data() + p * 8, 8);
    EXPECT_EQ(id == -1, p >= kStart) << p;
  }
  std::vector<std::vector<std::span<const uint8_t>>> tables;
  for (const auto& r : parts->rows) tables.push_back({std::span<const uint8_t>(r)});
  auto second = *f->open_stream();
  ASSERT_TRUE(f->restore_parts(second, parts->bounded, tables).ok());
  auto r = f->forward({cpu::image_testing::span_piece(second, t, 100, kLength - 100, s, f->config().dim)});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE((*r)[0].logits == rows_from(whole, 100)) << "resumed mid-span != whole";
  // Decode rows after the image prompt run as graphs: the same bits as eager.
  auto decode = [&](bool graphs) {
    f->set_cuda_graphs(graphs);
    int32_t at = 0;
    run(*f, t, s, {kLength}, &at);
    std::vector<float> out;
    for (int32_t tok : {11, 12, 13}) {
      auto d = f->forward({Piece{at, {tok}, {0}, {}}});
      EXPECT_TRUE(d.ok());
      if (d.ok()) out.insert(out.end(), (*d)[0].logits.begin(), (*d)[0].logits.end());
    }
    return out;
  };
  const auto eager = decode(false);
  decode(true);  // captures
  EXPECT_TRUE(decode(true) == eager) << "graph replay after an image prompt != eager";
}

TEST(CudaImageRows, EngramGateIsZeroOnSpanRows) {
  auto f = cuda_forward(weights());
  ASSERT_TRUE(f);
  std::map<int, std::vector<float>> before, after;
  f->set_layer_probe([&](int layer, const std::vector<float>& h) { before[layer + 1] = h; });
  f->set_op_probe([&](int layer, const char* op, const std::vector<float>& v) {
    if (std::string(op) == "engram") after[layer] = v;
  });
  run(*f, image_prompt(4), span(7), {kLength});
  const family::ModelPlan& cfg = f->config();
  const int64_t width = cfg.hc_mult * cfg.dim;
  ASSERT_FALSE(cfg.engram_layers.empty());
  for (int l : cfg.engram_layers) {
    ASSERT_TRUE(before.count(l) && after.count(l)) << l;
    int64_t wrong = 0;
    for (int64_t r = 0; r < kLength; ++r) {
      const bool same = std::equal(before[l].begin() + r * width, before[l].begin() + (r + 1) * width,
                                   after[l].begin() + r * width);
      wrong += same != (r >= kStart && r < kStart + kCount);
    }
    EXPECT_EQ(wrong, 0) << "layer " << l;
  }
}

TEST(CudaImageRows, SpanRowsRouteWithBiasVlAndTextRowsNeverReadIt) {
  const std::vector<float> skewed = cpu::image_testing::skewed_bias(weights()->plan.n_experts);
  const std::vector<float> nan(skewed.size(), std::numeric_limits<float>::quiet_NaN());
  const auto t = image_prompt(5);
  const int64_t V = weights()->config.vocab_size;
  auto base_f = cuda_forward(weights());
  ASSERT_TRUE(base_f);
  const auto base = run(*base_f, t, span(8), {kLength});
  const auto text = run(*base_f, prompt(static_cast<int>(kLength), 5), Span{}, {kLength});
  const auto unflagged = run(*base_f, t, span(8, false), {kLength});
  {
    auto f = cuda_forward(cpu::image_testing::with_bias_vl(weights(), skewed));
    ASSERT_TRUE(f);
    const auto routed = run(*f, t, span(8), {kLength});
    EXPECT_TRUE(std::equal(base.begin(), base.begin() + kStart * V, routed.begin())) << "rows before the span moved";
    EXPECT_NE(rows_from(routed, kStart), rows_from(base, kStart));
  }
  for (const auto& poison : {skewed, nan}) {
    auto f = cuda_forward(cpu::image_testing::with_bias_vl(weights(), poison));
    ASSERT_TRUE(f);
    EXPECT_TRUE(run(*f, prompt(static_cast<int>(kLength), 5), Span{}, {kLength}) == text) << "text read bias_vl";
    EXPECT_TRUE(run(*f, t, span(8, false), {kLength}) == unflagged) << "unflagged rows read bias_vl";
  }
}

// The whole-model gate on one prompt with a span whose rows are embedding rows of other tokens (the text rows'
// distribution), image flags on: NRMS(CUDA, ref64) <= 1.05 NRMS(ref32, ref64) and top-1 on every row.
TEST(CudaImageRows, GateAgainstTheOracle) {
  const auto w = weights(family::WeightProfile::gate);
  const auto t = image_prompt(6);
  const Span s{kStart, kCount, cpu::image_testing::embedding_rows(*w, kCount, 17), true};
  auto f = cuda_forward(w);
  ASSERT_TRUE(f);
  expect_gate(w, t, {&s}, run(*f, t, s, {kLength}), "image prompt gate");
}

// Several images in one prompt: three spans of different lengths (one crossing the window, one ending where the
// next starts but one text row between), rows from the embedding table. Fed whole and in pieces that cut each span
// (pieces == whole, bit for bit), and gated against the oracle like the one-span prompt.
TEST(CudaImageRows, SeveralImagesPiecesEqualWholeAndGate) {
  const auto w = weights(family::WeightProfile::gate);
  const int64_t V = w->config.vocab_size, D = w->plan.dim, length = 330;
  std::vector<int32_t> t = prompt(static_cast<int>(length), 9);
  const Span spans[3] = {{12, 47, cpu::image_testing::embedding_rows(*w, 47, 21), true},
                         {60, 150, cpu::image_testing::embedding_rows(*w, 150, 22), true},
                         {211, 94, cpu::image_testing::embedding_rows(*w, 94, 23), true}};
  const std::vector<const Span*> all = {&spans[0], &spans[1], &spans[2]};
  for (const Span& s : spans)
    for (int64_t i = s.start; i < s.start + s.count; ++i) t[i] = 129264;
  auto f = cuda_forward(w);
  ASSERT_TRUE(f);
  const auto whole = run_spans(*f, t, all, {length}, D);
  ASSERT_EQ(static_cast<int64_t>(whole.size()), length * V);
  EXPECT_TRUE(run_spans(*f, t, all, {30, 70, 101, 64, 65}, D) == whole) << "several images: pieces != whole";
  expect_gate(w, t, all, whole, "several-image prompt gate (spans of 47, 150, 94 rows)");
}

}  // namespace
}  // namespace dsv4::cuda
