// The CUDA forward on EXL3 linears (Mia layout; tiny by default, DSV4_GPU_PRESET=small the larger
// preset) against the CPU oracle on the same weights. The whole-model gate (docs/numerics.md): the
// gate weights with every linear the Mia layout stores as EXL3 re-encoded as the pack writer encodes
// it (family::exl3_gate_weights), gate::kPrompts prompts pooled, NRMS(CUDA, ref64) <= 1.05 F and top-1 on
// every row. On a synthetic pack written by write_synthetic_exl3_pack (random-profile values, loaded
// by family::open_model as `--backend cuda` does): the EXL3 pieces alone against the oracle's formula in
// double (cpu::exl3_linear_bf16/_acc) — the linear kinds through their ordinary calls (FP8, FP4, bf16
// block-diagonal wo_a, fp32 head) and the grouped routed experts, each row bit-identical alone and
// in a batch, bf16 outputs within NRMS 2^-8 of ref64 (a bf16 ulp is at most 2^-7 relative: more is a
// wrong sum, not rounding), fp32 outputs within 1e-5; the exact equalities on CUDA — pieces ==
// whole, a k-row verify == k single steps, batched == alone; and, as information only (random
// weights are chaotic), the one-prompt ratio NRMS(CUDA, ref64) / F with its per-layer table.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "forward_testing.h"
#include "backends/cpu/forward.h"
#include "backends/cpu/moe.h"
#include "backends/cuda/runtime/arena.h"
#include "backends/cuda/runtime/device_buffer.h"
#include "backends/cuda/exl3/exl3_view.h"
#include "backends/cuda/forward/forward.h"
#include "backends/cuda/kernels/linear/linear.cuh"
#include "backends/cuda/model/upload.h"
#include "core/bf16.h"
#include "core/thread_pool.h"
#include "family/deepseek_v41/gate_checkpoint.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/synth_exl3.h"
#include "family/deepseek_v41/synthetic_exl3.h"

namespace dsv4::cuda {
namespace {

using namespace gpu_testing;  // prompts, rows, NRMS, argmax, oracle runs, the gate, preset_name
using engine::Piece;

// A folder removed when this object goes (at exit for a static one). The models' views map the files of the
// packs, and the device upload reads those files by path: they stay until the last upload is done.
struct RemovedAtEnd {
  std::string path;
  ~RemovedAtEnd() {
    if (!path.empty()) std::filesystem::remove_all(path);
  }
};

// The pack is written once per run into DSV4_EXL3_PACK_DIR (kept), or a fresh temporary folder removed at exit.
const std::string& pack_dir() {
  static RemovedAtEnd temporary;
  static const std::string dir = [] {
    const char* env = std::getenv("DSV4_EXL3_PACK_DIR");
    const std::string d = env ? std::string(env)
                              : (std::filesystem::temp_directory_path() /
                                 ("dsv4_exl3_gpu_" + preset_name() + "_" + std::to_string(getpid()))).string();
    if (!env) temporary.path = d;
    auto preset = family::parse_preset(preset_name());
    EXPECT_TRUE(preset.ok());
    family::Exl3SynthOptions o;
    o.seed = 5;
    o.sync = false;
    o.release_dir = d + "/release-engram";
    auto r = family::write_synthetic_exl3_pack(family::preset_config(*preset, family::Variant::v41), d, o);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (r.ok())
      std::printf("pack %s: %lld tensors, %d EXL3 linears, %.2f bits per weight\n", d.c_str(),
                  static_cast<long long>(r->tensors), r->exl3_linears, r->bits);
    return d;
  }();
  return dir;
}

std::shared_ptr<const family::Model> weights() {
  static std::shared_ptr<const family::Model> w = [] {
    auto r = family::open_model(pack_dir(), family::OpenOptions{pack_dir() + "/release-engram"});
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::shared_ptr<const family::Model>(*r) : nullptr;
  }();
  return w;
}

// The EXL3 gate weights of the preset (family::exl3_gate_weights: V4.1, no drafter).
std::shared_ptr<const family::Model> gate_weights() {
  static std::shared_ptr<const family::Model> w = [] {
    auto preset = family::parse_preset(preset_name());
    EXPECT_TRUE(preset.ok());
    const auto t0 = std::chrono::steady_clock::now();
    auto r = family::exl3_gate_weights(family::preset_config(preset.ok() ? *preset : family::Preset::tiny,
                                                             family::Variant::v41));
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    std::printf("EXL3 gate weights (preset %s): encoded in %.1f s\n", preset_name().c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return r.ok() ? std::shared_ptr<const family::Model>(*r) : nullptr;
  }();
  return w;
}

// The device model of the pack (gate false) or of the gate weights, uploaded once.
std::shared_ptr<const ModelDevice> device_model(bool gate = false) {
  static std::shared_ptr<const ModelDevice> models[2];
  std::shared_ptr<const ModelDevice>& model = models[gate];
  const auto w = gate ? gate_weights() : weights();
  if (!model && w) {
    auto m = ModelDevice::upload(w, ModelDeviceOptions{});
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (m.ok()) std::printf("EXL3 model on the device: %.1f MiB of weights\n", (*m)->weight_bytes() / 1048576.0);
    if (m.ok()) model = std::shared_ptr<const ModelDevice>(std::move(*m));
  }
  return model;
}

std::unique_ptr<Forward> cuda_forward(bool gate = false) {
  auto model = device_model(gate);
  if (!model) return nullptr;
  ForwardOptions o;
  o.max_context = 4096;
  o.max_rollback = 16;
  o.max_call_rows = 512;
  auto f = Forward::create(model, o);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? std::move(*f) : nullptr;
}

// Deterministic bf16 values in [-2, 2).
std::vector<float> bf16_rows(int64_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = round_bf16((static_cast<float>(s >> 8) / 16777216.0f) * 4.0f - 2.0f);
  }
  return v;
}

double nrms64(const std::vector<float>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

template <typename T>
DeviceBuffer to_device(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  EXPECT_EQ(cudaMemcpy(b.get(), v.data(), b.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  return b;
}

std::vector<float> to_host(const DeviceBuffer& b, size_t n) {
  std::vector<float> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), b.get(), n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

// One linear kind: `call(x, rows, y)` on the device against the oracle's formula in double.
template <typename Call>
void check_kind(const char* name, const family::Exl3Linear& W, bool f32_out, Call&& call) {
  const int64_t rows = 5;
  const auto x = bf16_rows(rows * W.in, static_cast<uint32_t>(W.in * 31 + W.out));
  DeviceBuffer dx = to_device(x), dy(rows * W.out * sizeof(float)), d1(W.out * sizeof(float));
  ASSERT_EQ(call(dx.as<float>(), rows, dy.as<float>()), cudaSuccess) << name;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << name;
  const auto y = to_host(dy, rows * W.out);
  for (int64_t r = 0; r < rows; ++r) {  // each row alone: the same bits
    ASSERT_EQ(call(dx.as<float>() + r * W.in, 1, d1.as<float>()), cudaSuccess) << name;
    const auto y1 = to_host(d1, W.out);
    EXPECT_TRUE(std::equal(y1.begin(), y1.end(), y.begin() + r * W.out)) << name << ": row " << r << " alone differs";
  }
  ThreadPool pool(4);
  std::vector<double> ref(rows * W.out);
  if (f32_out) {
    std::vector<double> xd(x.begin(), x.end());
    cpu::exl3_linear_acc<double>(pool, xd.data(), rows, W, ref.data());
  } else {
    std::vector<float> y64(rows * W.out);
    cpu::exl3_linear_bf16<double>(pool, x.data(), rows, W, y64.data());
    ref.assign(y64.begin(), y64.end());
  }
  const double n = nrms64(y, ref);
  std::printf("%-28s [%lld -> %lld], %zu part(s): NRMS(cuda, ref64) = %.3e\n", name, static_cast<long long>(W.in),
              static_cast<long long>(W.out), W.parts.size(), n);
  EXPECT_LE(n, f32_out ? 1e-5 : std::ldexp(1.0, -8)) << name;
}

TEST(CudaExl3Pack, LinearKindsMatchTheFormulaAndAreBatchInvariant) {
  auto w = weights();
  ASSERT_TRUE(w);
  Arena A(size_t(256) << 20);
  const family::LayerWeights& L = w->weights.layers[0];
  ASSERT_TRUE(L.wq_a.exl3 && L.wo_a.exl3 && w->weights.head.exl3 && L.experts.at(1).w1.exl3);
  Uploader up(A);  // as ModelDevice::upload takes each kind (wo_a: the bf16 view of its EXL3 linear)
  auto wq_a = upload(L.wq_a, up, "wq_a");
  auto wo_a = upload_dequant_bf16(L.wo_a, up, "wo_a");
  auto head = upload_f32(w->weights.head, up, "head");
  auto e1 = upload(L.experts[1].w1, up, "experts.1.w1");
  auto shared = upload(L.shared_w2, up, "shared.w2");
  ASSERT_TRUE(wq_a.ok() && wo_a.ok() && head.ok() && e1.ok() && shared.ok());
  auto ran = up.run();
  ASSERT_TRUE(ran.ok()) << ran.status().to_string();
  check_kind("fp8_linear(wq_a)", *L.wq_a.exl3, false,
             [&](const float* x, int64_t r, float* y) { return fp8_linear(x, r, *wq_a, 128, y, nullptr); });
  check_kind("fp8_linear(shared.w2)", *L.shared_w2.exl3, false,
             [&](const float* x, int64_t r, float* y) { return fp8_linear(x, r, *shared, 128, y, nullptr); });
  check_kind("fp4_linear(experts.1.w1)", *L.experts[1].w1.exl3, false,
             [&](const float* x, int64_t r, float* y) { return fp4_linear(x, r, *e1, 32, y, nullptr); });
  check_kind("bf16_linear(wo_a, all groups)", *L.wo_a.exl3, false,
             [&](const float* x, int64_t r, float* y) { return bf16_linear(x, r, Bf16View{nullptr, 0, 0, wo_a->exl3}, y, nullptr); });
  check_kind("f32_linear(head)", *w->weights.head.exl3, true,
             [&](const float* x, int64_t r, float* y) { return f32_linear(x, r, *head, y, nullptr); });
}

TEST(CudaExl3Pack, RoutedExpertsMatchTheFormulaAndAreBatchInvariant) {
  auto w = weights();
  ASSERT_TRUE(w);
  auto m = device_model();
  ASSERT_TRUE(m);
  const MoeDevice& M = m->layers[0].ffn;
  const family::LayerWeights& C = w->weights.layers[0];
  ASSERT_GT(M.exl3.n_experts, 0);
  const int64_t D = M.exl3.dim, I = M.exl3.inter, E = M.exl3.n_experts, rows = 6;
  const int K = 2;
  // Pairs sorted by (expert, row): row r takes experts (r + k·3) mod E, weight (k + 1) / 4.
  struct Pair { int32_t row, expert; float weight; };
  std::vector<Pair> pairs;
  for (int32_t e = 0; e < E; ++e)
    for (int32_t r = 0; r < rows; ++r)
      for (int k = 0; k < K; ++k)
        if ((r + k * 3) % E == e) pairs.push_back({r, e, 0.25f * (k + 1)});
  const int64_t P = static_cast<int64_t>(pairs.size());
  std::vector<int32_t> prow, pexp;
  std::vector<float> pw;
  for (const Pair& p : pairs) {
    prow.push_back(p.row);
    pexp.push_back(p.expert);
    pw.push_back(p.weight);
  }
  const auto x = bf16_rows(rows * D, 77);
  DeviceBuffer dx = to_device(x), dr = to_device(prow), de = to_device(pexp), dw = to_device(pw);
  DeviceBuffer dh(exl3_routed_experts_scratch_bytes(P, M.exl3)), dout(P * D * sizeof(float)),
      dh1(exl3_routed_experts_scratch_bytes(1, M.exl3)), d1(D * sizeof(float));
  const float limit = static_cast<float>(w->config.swiglu_limit);
  ASSERT_EQ(exl3_routed_experts(dx.as<float>(), dr.as<int32_t>(), de.as<int32_t>(), dw.as<float>(), P, M.exl3, limit,
                                dh.get(), dout.as<float>(), nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto out = to_host(dout, P * D);
  ThreadPool pool(4);
  std::vector<double> ref(P * D);
  for (int64_t p = 0; p < P; ++p) {
    ASSERT_EQ(exl3_routed_experts(dx.as<float>(), dr.as<int32_t>() + p, de.as<int32_t>() + p, dw.as<float>() + p, 1,
                                  M.exl3, limit, dh1.get(), d1.as<float>(), nullptr), cudaSuccess);
    const auto one = to_host(d1, D);
    EXPECT_TRUE(std::equal(one.begin(), one.end(), out.begin() + p * D)) << "pair " << p << " alone differs";
    const family::Expert& X = C.experts[pairs[p].expert];
    std::vector<float> a(I), u(I), h(I), o(D);
    cpu::exl3_linear_bf16<double>(pool, &x[pairs[p].row * D], 1, *X.w1.exl3, a.data());
    cpu::exl3_linear_bf16<double>(pool, &x[pairs[p].row * D], 1, *X.w3.exl3, u.data());
    cpu::swiglu_clamped<double>(a.data(), u.data(), I, pairs[p].weight, limit, h.data());
    cpu::exl3_linear_bf16<double>(pool, h.data(), 1, *X.w2.exl3, o.data());
    for (int64_t d = 0; d < D; ++d) ref[p * D + d] = o[d];
  }
  const double n = nrms64(out, ref);
  std::printf("exl3_routed_experts: %lld pairs over %lld experts [%lld -> %lld -> %lld]: NRMS(cuda, ref64) = %.3e\n",
              static_cast<long long>(P), static_cast<long long>(E), static_cast<long long>(D),
              static_cast<long long>(I), static_cast<long long>(D), n);
  EXPECT_LE(n, std::ldexp(1.0, -8));
}

// The whole-model gate (docs/numerics.md) on the EXL3 gate weights: gate::kPrompts prompts of
// gate::kPromptLength tokens each fed whole to a fresh stream, every row's logits pooled.
TEST(CudaExl3Forward, WholeModelGate) {
  auto f = cuda_forward(true);
  ASSERT_TRUE(f);
  auto v = gpu_testing::forward_gate(*f, gate_weights(), "preset " + preset_name() + ", EXL3 gate weights");
  std::printf("whole-model gate, EXL3 %s, %d prompts x %d tokens: %s\n", preset_name().c_str(), cpu::gate::kPrompts,
              cpu::gate::kPromptLength, v.summary().c_str());
  EXPECT_TRUE(v.pass()) << v.summary();
}

// The gate on files: the gate pack `dsv4 synth --profile gate --format exl3` writes
// (family::write_gate_exl3_pack), opened by family::open_model with its Engram release shards as
// `--backend cuda` loads a pack, uploaded, and gated against the oracle on the loaded weights
// (which are family::written_exl3_gate_weights: docs/numerics.md, "The gate on written files").
TEST(CudaExl3Forward, WholeModelGateOnWrittenPack) {
  auto preset = family::parse_preset(preset_name());
  ASSERT_TRUE(preset.ok());
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("dsv4_exl3_gate_pack_" + preset_name() + "_" + std::to_string(getpid()))).string();
  const RemovedAtEnd temporary{dir};  // when the test ends: the upload reads the files by path
  family::Exl3SynthOptions o;
  o.sync = false;
  o.release_dir = dir + "/release-engram";
  const auto t0 = std::chrono::steady_clock::now();
  auto written = family::write_gate_exl3_pack(family::preset_config(*preset, family::Variant::v41), dir, o);
  ASSERT_TRUE(written.ok()) << written.status().to_string();
  auto loaded = family::open_model(dir, family::OpenOptions{o.release_dir});
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  std::printf("EXL3 gate pack (preset %s): written and loaded in %.1f s, %lld bytes\n", preset_name().c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              static_cast<long long>(written->payload_bytes));
  std::shared_ptr<const family::Model> w(*loaded);
  auto m = ModelDevice::upload(w, ModelDeviceOptions{});
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ForwardOptions fo;
  fo.max_context = 4096;
  fo.max_rollback = 16;
  fo.max_call_rows = 512;
  auto f = Forward::create(std::shared_ptr<const ModelDevice>(std::move(*m)), fo);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto v = gpu_testing::forward_gate(**f, w, "preset " + preset_name() + ", EXL3 gate pack loaded from files");
  std::printf("whole-model gate, EXL3 gate pack from files, %s, %d prompts x %d tokens: %s\n", preset_name().c_str(),
              cpu::gate::kPrompts, cpu::gate::kPromptLength, v.summary().c_str());
  EXPECT_TRUE(v.pass()) << v.summary();
}

// Information only (the pack's random-profile values are chaotic: docs/numerics.md): the per-layer
// table and the one-prompt ratio NRMS(CUDA, ref64) / F of a 40-token prompt on the written pack, and
// the time of single-row decode steps after it.
TEST(CudaExl3Forward, RandomPackOnePromptRatio) {
  ASSERT_TRUE(weights());
  const int n = 40;
  const auto toks = prompt(n, 0);
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
  auto r = f->forward({Piece{*s, toks, all_rows(n)}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  cu.logits = (*r)[0].logits;
  f->set_profile(nullptr);
  f->set_layer_probe(nullptr);
  for (const auto& [op, ms] : ops) std::printf("op %-20s %8.3f ms\n", op.c_str(), ms);
  ASSERT_EQ(cu.layers.size(), r64.layers.size());
  std::printf("EXL3 pack, preset %s, random values: per-layer NRMS of the residual streams against ref64\n",
              preset_name().c_str());
  print_layer_table(cu, r32, r64);
  const double F = nrms(r32.logits, r64.logits), N = nrms(cu.logits, r64.logits);
  int agree = 0, agree32 = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t ref = argmax(&r64.logits[i * V], V);
    agree += argmax(&cu.logits[i * V], V) == ref;
    agree32 += argmax(&r32.logits[i * V], V) == ref;
  }
  std::printf("EXL3 pack, one prompt (information): F = NRMS(ref32,ref64) = %.4e, NRMS(cuda,ref64) = %.4e (%.3f F), "
              "top-1 vs ref64: cuda %d/%d, ref32 %d/%d\n", F, N, N / F, agree, n, agree32, n);
  EXPECT_LT(N, 0.5);  // a broken forward lands near NRMS 1; rounding chance stays within a few F
  // Single-row decode steps after the prompt (wall time, synchronized per step).
  const auto t0 = std::chrono::steady_clock::now();
  const int steps = 16;
  for (int i = 0; i < steps; ++i) ASSERT_TRUE(f->forward({Piece{*s, {toks[i]}, {0}}}).ok());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
  std::printf("decode on the pack: %.3f ms per single-row step (%d steps, after %d prompt rows)\n", ms, steps, n);
}

// Logits of `toks` fed to a fresh stream in the given piece sizes (all rows' logits).
std::vector<float> fed_in_pieces(Forward& f, const std::vector<int32_t>& toks, const std::vector<int>& sizes) {
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
  return out;
}

TEST(CudaExl3Forward, PiecesEqualWholeBitForBit) {
  auto f = cuda_forward();
  ASSERT_TRUE(f);
  const auto toks = prompt(300, 1);  // crosses the window (128) and the compression groups at odd splits
  const auto whole = fed_in_pieces(*f, toks, {300});
  const auto pieces = fed_in_pieces(*f, toks, {13, 1, 130, 7, 1, 148});
  ASSERT_EQ(whole.size(), pieces.size());
  ASSERT_FALSE(whole.empty());
  EXPECT_TRUE(whole == pieces) << "pieces differ from the whole prompt";
}

TEST(CudaExl3Forward, VerifyWindowEqualsSingleSteps) {
  auto f = cuda_forward();
  ASSERT_TRUE(f);
  const auto toks = prompt(150, 2);
  const auto window = fed_in_pieces(*f, toks, {144, 6});
  const auto steps = fed_in_pieces(*f, toks, {144, 1, 1, 1, 1, 1, 1});
  const int64_t V = weights()->config.vocab_size;
  ASSERT_EQ(window.size(), steps.size());
  ASSERT_FALSE(window.empty());
  EXPECT_TRUE(std::equal(window.end() - 6 * V, window.end(), steps.end() - 6 * V)) << "6-row verify != 6 single steps";
}

TEST(CudaExl3Forward, StreamInBatchEqualsAlone) {
  auto f = cuda_forward();
  ASSERT_TRUE(f);
  const auto a = prompt(140, 3), b = prompt(60, 4), c = prompt(9, 5);
  const auto alone = fed_in_pieces(*f, a, {134, 6});
  ASSERT_FALSE(alone.empty());
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

TEST(CudaExl3Forward, DraftAgreesWithOracle) {
  auto f = cuda_forward();
  ASSERT_TRUE(f);
  ASSERT_FALSE(weights()->weights.dspark.empty()) << "the synthetic pack carries the DSpark stages";
  const auto toks = prompt(50, 7);
  auto s = *f->open_stream();
  ASSERT_TRUE(f->forward({Piece{s, toks, {}}}).ok());
  auto d = f->draft(s, 77);
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
  std::printf("DSpark draft block on the pack: NRMS(cuda, ref64) = %.3e, Fd = NRMS(ref32, ref64) = %.3e (%.2f Fd)\n", n,
              Fd, Fd > 0 ? n / Fd : 0.0);
  EXPECT_LE(n, 1.5 * Fd);  // the bound of forward_cuda_test's drafter check
}

}  // namespace
}  // namespace dsv4::cuda
