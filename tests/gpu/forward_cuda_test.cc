// The CUDA forward end to end against the CPU oracle on a preset (tiny by default; DSV4_GPU_PRESET
// = small selects the larger one) of a variant (DSV4_GPU_VARIANT = v41 by default, or v4-0731):
// the whole-model gate on the gate weights (docs/numerics.md: pooled NRMS(CUDA, ref64) <= 1.05 F
// over the gate's prompts, top-1 on every position) with a per-layer NRMS table; on the random
// weights, as information, the per-layer table and the one-prompt ratio; and the exact equalities
// on CUDA itself — pieces == whole, a k-row verify == k single steps, a stream in a batch ==
// alone, rollback and snapshot/restore == continuing.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <span>
#include <thread>

#include "forward_testing.h"
#include "preset_weights_testing.h"
#include "backends/cpu/forward.h"
#include "backends/cpu/gate.h"
#include "engine/lane_backend.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "backends/cuda/forward/forward.h"
#include "family/deepseek_v41/preset.h"

namespace dsv4::cuda {
namespace {

using namespace gpu_testing;  // prompts, rows, NRMS, argmax, oracle runs, the gate, preset_name, variant_name
using engine::Piece;

std::shared_ptr<const family::Model> weights() {
  static std::shared_ptr<const family::Model> w = chosen_preset_weights(1);
  return w;
}

// The gate weights of the same preset and variant (family::WeightProfile::gate, no drafter).
std::shared_ptr<const family::Model> gate_weights() {
  static std::shared_ptr<const family::Model> w = [] {
    return family::synthetic_weights(weights()->config, cpu::gate::kSeed, false, family::WeightProfile::gate);
  }();
  return w;
}

std::unique_ptr<Forward> cuda_forward(bool gate = false) {
  static std::shared_ptr<const ModelDevice> models[2];
  std::shared_ptr<const ModelDevice>& model = models[gate];
  if (!model) model = gpu_testing::upload(gate ? gate_weights() : weights());
  if (!model) return nullptr;
  ForwardOptions o;
  o.max_context = 4096;
  o.max_rollback = 16;
  o.max_call_rows = 512;
  auto f = Forward::create(model, o);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? std::move(*f) : nullptr;
}

// The whole-model gate (docs/numerics.md): the gate weights, gate::kPrompts prompts of
// gate::kPromptLength tokens each fed whole to a fresh stream, every row's logits pooled.
TEST(CudaForward, WholeModelGate) {
  auto f = cuda_forward(true);
  ASSERT_TRUE(f);
  auto v = gpu_testing::forward_gate(*f, gate_weights(),
                                     "preset " + preset_name() + ", variant " + variant_name() + ", gate weights");
  std::printf("whole-model gate, %s %s, %d prompts x %d tokens: %s\n", preset_name().c_str(), variant_name().c_str(),
              cpu::gate::kPrompts, cpu::gate::kPromptLength, v.summary().c_str());
  EXPECT_TRUE(v.pass()) << v.summary();
}

// Information only (the random weights are chaotic: docs/numerics.md): the per-layer table and the
// one-prompt ratio NRMS(CUDA, ref64) / F of a 40-token prompt, as measured before the gate weights.
TEST(CudaForward, RandomWeightsOnePromptRatio) {
  const auto toks = prompt(40, 0);
  const int64_t V = weights()->config.vocab_size;
  LogitsRun r32 = oracle_run(weights(), cpu::Precision::ref32, toks);
  LogitsRun r64 = oracle_run(weights(), cpu::Precision::ref64, toks);
  auto f = cuda_forward();
  ASSERT_TRUE(f);
  LogitsRun cu;
  f->set_layer_probe([&](int, const std::vector<float>& h) { cu.layers.push_back(h); });
  std::map<std::string, double> ops;  // sections synchronized: a device fault names its op
  f->set_profile(&ops);
  auto s = f->open_stream();
  ASSERT_TRUE(s.ok());
  auto r = f->forward({Piece{*s, toks, all_rows(40)}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  cu.logits = (*r)[0].logits;
  f->set_profile(nullptr);
  f->set_layer_probe(nullptr);
  for (const auto& [op, ms] : ops) std::printf("op %-20s %8.3f ms\n", op.c_str(), ms);
  ASSERT_EQ(cu.layers.size(), r64.layers.size());
  std::printf("preset %s, variant %s, random weights: per-layer NRMS of the residual streams against ref64\n",
              preset_name().c_str(), variant_name().c_str());
  print_layer_table(cu, r32, r64);
  const double F = nrms(r32.logits, r64.logits), N = nrms(cu.logits, r64.logits);
  int agree = 0, agree32 = 0;
  for (int i = 0; i < 40; ++i) {
    const int64_t ref = argmax(&r64.logits[i * V], V);
    agree += argmax(&cu.logits[i * V], V) == ref;
    agree32 += argmax(&r32.logits[i * V], V) == ref;
  }
  std::printf("random weights, one prompt (information): F = NRMS(ref32,ref64) = %.4e, NRMS(cuda,ref64) = %.4e "
              "(%.3f F), top-1 vs ref64: cuda %d/40, ref32 %d/40\n", F, N, N / F, agree, agree32);
  EXPECT_LT(N, 0.5);  // a broken forward lands near NRMS 1; rounding chance stays within a few F
}

// Logits of `toks` fed to a fresh stream in the given piece sizes (all rows' logits).
std::vector<float> fed_in_pieces(Forward& f, const std::vector<int32_t>& toks, const std::vector<int>& sizes) {
  std::map<std::string, double> ops;  // sections synchronized: a device fault names its op
  f.set_profile(&ops);
  auto s = f.open_stream();
  EXPECT_TRUE(s.ok());
  std::vector<float> out;
  size_t at = 0;
  for (int n : sizes) {
    std::vector<int32_t> piece(toks.begin() + at, toks.begin() + at + n);
    auto r = f.forward({Piece{*s, piece, all_rows(n)}});
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return {};
    out.insert(out.end(), (*r)[0].logits.begin(), (*r)[0].logits.end());
    at += n;
  }
  f.set_profile(nullptr);
  return out;
}

TEST(CudaForward, PiecesEqualWholeBitForBit) {
  auto f = cuda_forward();
  ASSERT_TRUE(f);
  const auto toks = prompt(300, 1);  // crosses the window (128) and ratio-2 groups at odd splits
  const auto whole = fed_in_pieces(*f, toks, {300});
  const auto pieces = fed_in_pieces(*f, toks, {13, 1, 130, 7, 1, 148});
  ASSERT_EQ(whole.size(), pieces.size());
  EXPECT_TRUE(whole == pieces) << "pieces differ from the whole prompt";
}

TEST(CudaForward, VerifyWindowEqualsSingleSteps) {
  auto f = cuda_forward();
  ASSERT_TRUE(f);
  const auto toks = prompt(150, 2);
  const auto window = fed_in_pieces(*f, toks, {144, 6});
  const auto steps = fed_in_pieces(*f, toks, {144, 1, 1, 1, 1, 1, 1});
  const int64_t V = weights()->config.vocab_size;
  ASSERT_EQ(window.size(), steps.size());
  EXPECT_TRUE(std::equal(window.end() - 6 * V, window.end(), steps.end() - 6 * V)) << "6-row verify != 6 single steps";
}

TEST(CudaForward, StreamInBatchEqualsAlone) {
  auto f = cuda_forward();
  ASSERT_TRUE(f);
  const auto a = prompt(140, 3), b = prompt(60, 4), c = prompt(9, 5);
  const auto alone = fed_in_pieces(*f, a, {134, 6});
  // The same stream beside two others (a prompt piece and a single row) in its last call.
  auto sa = *f->open_stream(), sb = *f->open_stream(), sc = *f->open_stream();
  std::vector<int32_t> a0(a.begin(), a.begin() + 134), a1(a.begin() + 134, a.end());
  ASSERT_TRUE(f->forward({Piece{sa, a0, all_rows(134)}, Piece{sb, std::vector<int32_t>(b.begin(), b.begin() + 50), {}}}).ok());
  auto r = f->forward({Piece{sb, std::vector<int32_t>(b.begin() + 50, b.end()), {0}}, Piece{sa, a1, all_rows(6)},
                       Piece{sc, c, {8}}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const int64_t V = weights()->config.vocab_size;
  EXPECT_TRUE(std::equal(alone.end() - 6 * V, alone.end(), (*r)[1].logits.begin())) << "batched != alone";
}

TEST(CudaForward, RollbackAndSnapshotEqualContinuing) {
  auto f = cuda_forward();
  ASSERT_TRUE(f);
  const auto toks = prompt(160, 6);
  const auto ref = fed_in_pieces(*f, toks, {150, 10});
  const int64_t V = weights()->config.vocab_size;
  std::vector<int32_t> head(toks.begin(), toks.begin() + 150), tail(toks.begin() + 150, toks.end());
  auto s = *f->open_stream();
  ASSERT_TRUE(f->forward({Piece{s, head, {}}}).ok());
  auto snap = f->snapshot(s);
  ASSERT_TRUE(snap.ok()) << snap.status().to_string();
  // A rejected window of other tokens, rolled back.
  ASSERT_TRUE(f->forward({Piece{s, prompt(7, 9), all_rows(7)}}).ok());
  ASSERT_TRUE(f->truncate(s, 150).ok());
  auto r = f->forward({Piece{s, tail, all_rows(10)}});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(std::equal(ref.end() - 10 * V, ref.end(), (*r)[0].logits.begin())) << "rollback changed the stream";
  // Restored into a new stream while the legacy default stream is held up by a host function: a
  // stream's caches are cleared on the forward's own CUDA stream, ordered before the restore's copies
  // (a clear queued on the held stream would land after them, once it drains, and zero the caches).
  auto hold = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); };
  ASSERT_EQ(cudaLaunchHostFunc(cudaStreamLegacy, hold, nullptr), cudaSuccess);
  auto s2 = *f->open_stream();
  ASSERT_TRUE(f->restore(s2, *snap).ok());
  ASSERT_EQ(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
  auto r2 = f->forward({Piece{s2, tail, all_rows(10)}});
  ASSERT_TRUE(r2.ok());
  EXPECT_TRUE(std::equal(ref.end() - 10 * V, ref.end(), (*r2)[0].logits.begin())) << "restored != continuing";
  // Split snapshots (the family's layout, as the prompt cache keeps them): the rows from position 64 on are the
  // tail of the whole tables; a stream rebuilt from the bounded part and the tables in two chunks continues the same.
  auto s3 = *f->open_stream();
  ASSERT_TRUE(f->forward({Piece{s3, head, {}}}).ok());
  auto parts = f->snapshot_parts(s3, 0);
  ASSERT_TRUE(parts.ok()) << parts.status().to_string();
  auto later = f->snapshot_parts(s3, 64);
  ASSERT_TRUE(later.ok()) << later.status().to_string();
  const std::vector<family::RowTableShape> tables = f->row_tables();
  ASSERT_EQ(parts->rows.size(), tables.size());
  ASSERT_EQ(later->rows.size(), tables.size());
  std::vector<std::vector<std::span<const uint8_t>>> chunks;
  for (size_t t = 0; t < tables.size(); ++t) {
    const std::vector<uint8_t>& all = parts->rows[t];
    EXPECT_EQ(static_cast<int64_t>(all.size()), tables[t].bytes(150)) << "table " << t;
    const size_t tail_bytes = later->rows[t].size();
    ASSERT_LE(tail_bytes, all.size());
    EXPECT_TRUE(std::equal(later->rows[t].begin(), later->rows[t].end(), all.end() - tail_bytes)) << "table " << t;
    chunks.push_back({std::span<const uint8_t>(all).first(all.size() - tail_bytes), std::span<const uint8_t>(all).last(tail_bytes)});
  }
  auto s4 = *f->open_stream();
  ASSERT_TRUE(f->restore_parts(s4, parts->bounded, chunks).ok());
  EXPECT_EQ(*f->length(s4), 150);
  auto r4 = f->forward({Piece{s4, tail, all_rows(10)}});
  ASSERT_TRUE(r4.ok());
  EXPECT_TRUE(std::equal(ref.end() - 10 * V, ref.end(), (*r4)[0].logits.begin())) << "restored from parts != continuing";
  // A bounded part cut short is refused and the stream stays as it was.
  auto s5 = *f->open_stream();
  std::vector<uint8_t> cut(parts->bounded.begin(), parts->bounded.end() - 1);
  EXPECT_FALSE(f->restore_parts(s5, cut, chunks).ok());
  EXPECT_EQ(*f->length(s5), 0);
}

TEST(CudaForward, DraftAgreesWithOracle) {
  auto f = cuda_forward();
  ASSERT_TRUE(f);
  const auto toks = prompt(50, 7);
  auto s = *f->open_stream();
  ASSERT_TRUE(f->forward({Piece{s, toks, {}}}).ok());
  auto d = f->draft(s, 77);
  if (weights()->config.variant == family::Variant::v4) {  // the 0731 drafter is not run (docs/cpu-oracle.md): refused, as the oracle's
    EXPECT_EQ(d.status().code(), StatusCode::unimplemented);
    return;
  }
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  engine::DraftResult ref[2];
  for (int k = 0; k < 2; ++k) {
    cpu::OracleOptions o;
    o.precision = k == 0 ? cpu::Precision::ref32 : cpu::Precision::ref64;
    auto oracle = std::move(cpu::Oracle::create(weights(), o)).value();
    const int32_t os = oracle->open_stream();
    ASSERT_TRUE(oracle->forward({Piece{os, toks, {}}}).ok());
    auto r = oracle->draft(os, 77);
    ASSERT_TRUE(r.ok());
    ref[k] = *r;
  }
  ASSERT_EQ(d->tokens.size(), ref[1].tokens.size());
  const double n = nrms(d->logits, ref[1].logits), Fd = nrms(ref[0].logits, ref[1].logits);
  int same = 0, same32 = 0;
  for (size_t i = 0; i < ref[1].tokens.size(); ++i) {
    same += d->tokens[i] == ref[1].tokens[i];
    same32 += ref[0].tokens[i] == ref[1].tokens[i];
  }
  std::printf("DSpark draft block logits: NRMS(cuda, ref64) = %.3e, Fd = NRMS(ref32, ref64) = %.3e (%.2f Fd); "
              "tokens equal to ref64: cuda %d/%zu, ref32 %d/%zu\n", n, Fd, Fd > 0 ? n / Fd : 0.0, same,
              ref[1].tokens.size(), same32, ref[1].tokens.size());
  EXPECT_LE(n, 1.5 * Fd);  // a wrong stage shows as NRMS near 1, far above the references' spread
}

// The lane core's Backend over the CUDA forward: a window's keyed draws and logprobs equal those
// of single-row windows on another stream, keep rolls back, drafts survive a snapshot.
// Decode steps, rejected 6-row verify windows and a two-stream batch, each call made twice: with
// CUDA graphs (a key runs eagerly once, is captured on its second call, replayed after) on one set
// of streams and fully eager (graphs off, no position bound) on a twin set. Every logit is equal.
TEST(CudaForward, GraphReplayEqualsEagerBitForBit) {
  auto f = cuda_forward();
  ASSERT_TRUE(f);
  const auto toks = prompt(280, 10);
  const int start = 244;  // decode crosses the 256-position bucket of the graph keys (and, V4, the
                          // group ends of ratios 4, 16 and 32 at 256)
  std::vector<int32_t> head(toks.begin(), toks.begin() + start);
  int32_t g[2], e[2];
  for (int i = 0; i < 2; ++i) {
    g[i] = *f->open_stream();
    e[i] = *f->open_stream();
    ASSERT_TRUE(f->forward({Piece{g[i], head, {}}, Piece{e[i], head, {}}}).ok());
  }
  auto call = [&](bool graphs, const std::vector<Piece>& p) {
    f->set_cuda_graphs(graphs);
    auto r = f->forward(p);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    std::vector<float> out;
    if (r.ok())
      for (const auto& pr : *r) out.insert(out.end(), pr.logits.begin(), pr.logits.end());
    return out;
  };
  int compared = 0;
  for (int i = 0; i < 20; ++i) {  // single-stream decode steps
    const std::vector<int32_t> t{toks[start + i]};
    const auto a = call(true, {Piece{g[0], t, {0}}});
    const auto b = call(false, {Piece{e[0], t, {0}}});
    ASSERT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << "decode step " << i << ": graph != eager";
    ++compared;
  }
  const int64_t at = start + 20;
  const std::vector<int32_t> win(toks.begin() + at, toks.begin() + at + 6);
  for (int i = 0; i < 4; ++i) {  // the same 6-row verify window, rejected each time
    const auto a = call(true, {Piece{g[0], win, all_rows(6)}});
    const auto b = call(false, {Piece{e[0], win, all_rows(6)}});
    ASSERT_TRUE(f->truncate(g[0], at).ok());
    ASSERT_TRUE(f->truncate(e[0], at).ok());
    ASSERT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << "verify window " << i << ": graph != eager";
    ++compared;
  }
  for (int i = 0; i < 6; ++i) {  // both streams of a set in one call, at different lengths
    const std::vector<int32_t> t0{toks[at + i]}, t1{toks[start + i]};
    const auto a = call(true, {Piece{g[0], t0, {0}}, Piece{g[1], t1, {0}}});
    const auto b = call(false, {Piece{e[0], t0, {0}}, Piece{e[1], t1, {0}}});
    ASSERT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << "batch step " << i << ": graph != eager";
    ++compared;
  }
  f->set_cuda_graphs(true);
  const GraphCache::Stats& st = f->graph_stats();
  std::printf("graph calls: %d compared, %lld captures, %lld replays, %lld eager, %lld failed captures\n", compared,
              static_cast<long long>(st.captures), static_cast<long long>(st.replays),
              static_cast<long long>(st.eager), static_cast<long long>(st.failed_captures));
  EXPECT_EQ(st.failed_captures, 0);
  EXPECT_GT(st.captures, 0);
  // V4.1: 16 by the keys' count (ratio-2 parity, two position buckets). V4 tiny (ratios 4 and 16):
  // 13 on the decode steps and verify windows alone (groups completed per ratio, two buckets).
  EXPECT_GE(st.replays, 10);
}

TEST(CudaForward, LaneBackendWindowsKeepDraftsSnapshots) {
  auto f = cuda_forward();
  ASSERT_TRUE(f);
  engine::LaneBackendOptions lo;
  lo.model_id = "gpu-test";
  auto made = engine::LaneBackend::create(cuda_stream_forward(std::move(f)), 16, lo);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  lanes::Backend& b = **made;
  lanes::StreamSpec spec;
  spec.sampling.temperature = 0.8f;
  spec.seed = 1234;
  spec.max_rows = 200;
  const auto t = prompt(140, 8);
  ASSERT_TRUE(b.open(1, spec).ok());
  ASSERT_TRUE(b.open(2, spec).ok());
  std::vector<lanes::Piece> pieces = {{1, 0, {t.data(), 134}}, {2, 0, {t.data(), 100}}};
  ASSERT_TRUE(b.prefill(pieces).ok());
  lanes::Piece rest{2, 100, {t.data() + 100, 34}};
  ASSERT_TRUE(b.prefill({&rest, 1}).ok());
  std::vector<std::vector<lanes::RowResult>> whole;
  lanes::Window w{1, 134, {t.begin() + 134, t.end()}, true, 3};
  ASSERT_TRUE(b.verify({&w, 1}, &whole).ok());
  for (int i = 0; i < 6; ++i) {
    lanes::Window one{2, 134 + i, {t[134 + i]}, true, 3};
    std::vector<std::vector<lanes::RowResult>> r;
    ASSERT_TRUE(b.verify({&one, 1}, &r).ok());
    EXPECT_EQ(r[0][0].token, whole[0][i].token) << i;
    EXPECT_EQ(r[0][0].logprob, whole[0][i].logprob) << i;
  }
  ASSERT_TRUE(b.keep(1, 136).ok());
  lanes::Window again{1, 136, {t.begin() + 136, t.end()}, true, 0};
  std::vector<std::vector<lanes::RowResult>> r2;
  ASSERT_TRUE(b.verify({&again, 1}, &r2).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(r2[0][i].logprob, whole[0][i + 2].logprob);
  ASSERT_TRUE(b.keep(1, 140).ok());
  if (weights()->config.variant == family::Variant::v4) {  // no drafter: a restored stream continues as the original
    auto snap = b.snapshot(1);
    ASSERT_TRUE(snap.ok()) << snap.status().to_string();
    ASSERT_TRUE(b.open(3, spec).ok());
    ASSERT_TRUE(b.restore(3, *snap, 140).ok());
    const auto more = prompt(5, 10);
    std::vector<std::vector<lanes::RowResult>> a, c;
    lanes::Window wa{1, 140, more, true, 0}, wc{3, 140, more, true, 0};
    ASSERT_TRUE(b.verify({&wa, 1}, &a).ok());
    ASSERT_TRUE(b.verify({&wc, 1}, &c).ok());
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(c[0][i].token, a[0][i].token) << i;
      EXPECT_EQ(c[0][i].logprob, a[0][i].logprob) << i;
    }
    return;
  }
  std::vector<lanes::DraftProposal> d, d2;
  lanes::DraftRequest q{1, 42, 140, 3};
  ASSERT_TRUE(b.draft({&q, 1}, &d).ok());
  ASSERT_EQ(d[0].tokens.size(), 3u);
  auto snap = b.snapshot(1);
  ASSERT_TRUE(snap.ok()) << snap.status().to_string();
  ASSERT_TRUE(b.open(3, spec).ok());
  ASSERT_TRUE(b.restore(3, *snap, 140).ok());
  lanes::DraftRequest q2{3, 42, 140, 3};
  ASSERT_TRUE(b.draft({&q2, 1}, &d2).ok());
  EXPECT_EQ(d2[0].tokens, d[0].tokens);
  EXPECT_EQ(d2[0].probabilities, d[0].probabilities);
}

}  // namespace
}  // namespace dsv4::cuda
