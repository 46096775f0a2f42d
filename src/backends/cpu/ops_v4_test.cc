// Component tests of what V4 / 0731 adds to the oracle, each against values computed here from
// the model-spec.md §8 equations (not by the code under test): the Hadamard rotation, the
// overlapped compressor pooling with its position bias, hash routing, the bf16 per-head q norm
// and the 584-byte-style KV row.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "backends/cpu/attention.h"
#include "backends/cpu/compressor.h"
#include "backends/cpu/hadamard.h"
#include "backends/cpu/held_weights_testing.h"
#include "backends/cpu/kv_rows.h"
#include "backends/cpu/moe.h"

namespace dsv4::cpu {
namespace {

// The explicit Sylvester matrix: H[i][k] = (-1)^popcount(i & k).
std::vector<double> hadamard_explicit(const std::vector<double>& x) {
  const size_t n = x.size();
  std::vector<double> y(n, 0.0);
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < n; ++k) y[i] += (std::popcount(i & k) % 2 ? -1.0 : 1.0) * x[k];
  return y;
}

TEST(OracleV4Ops, HadamardSmallIsExact) {
  // n = 4: H x = (10, -2, -4, 0) for x = (1, 2, 3, 4), times 1/2.
  std::vector<float> x = {1, 2, 3, 4};
  hadamard_row<float>(x.data(), 4);
  EXPECT_EQ(x, (std::vector<float>{5, -1, -2, 0}));
}

TEST(OracleV4Ops, HadamardMatchesTheExplicitMatrix) {
  for (int64_t n : {16, 128}) {
    std::vector<float> x(n);
    std::vector<double> xd(n);
    for (int64_t i = 0; i < n; ++i) xd[i] = x[i] = static_cast<float>((i * 37 + 11) % 23 - 11);  // small integers
    const auto y = hadamard_explicit(xd);  // integers, exact in double
    std::vector<float> a = x, b = x;
    hadamard_row<float>(a.data(), n);
    hadamard_row<double>(b.data(), n);
    const double scale = 1.0 / std::sqrt(static_cast<double>(n));
    for (int64_t i = 0; i < n; ++i) {
      const float want = bf16_to_f32(f64_to_bf16(y[i] * scale));
      EXPECT_EQ(b[i], want) << "n " << n << " i " << i;
      EXPECT_NEAR(a[i], want, std::fabs(want) * 0x1p-7 + 1e-30) << "n " << n << " i " << i;
    }
  }
}

// The ratio-4 overlapped compressor on a 1-layer stream: wkv = identity, wgate = 2 * identity over
// w = 2n = D channels, so k_t = x_t and g_t = 2 x_t. Group j, channel c pools slots
// [x_{4(j-1)+t}[c] with score 2 x[c] + ape[t][c] ; x_{4j+t}[n+c] with 2 x[n+c] + ape[t][n+c]],
// the previous half empty for j = 0. Fed whole and in pieces that cut groups.
TEST(OracleV4Ops, OverlappedPoolingFollowsTheSpec) {
  const int64_t n = 4, w = 2 * n, r = 4, T = 13;
  family::ModelPlan cfg;
  cfg.dim = w;
  std::vector<float> kv_values(w * w, 0.0f), gate_values(w * w, 0.0f);
  for (int64_t i = 0; i < w; ++i) { kv_values[i * w + i] = 1.0f; gate_values[i * w + i] = 2.0f; }
  held_testing::HeldWeights held;
  const family::Matrix wkv = held.bf16(w, w, kv_values), wgate = held.bf16(w, w, gate_values);
  std::vector<float> ape(r * w), x(T * w);
  for (int64_t i = 0; i < r * w; ++i) ape[i] = static_cast<float>(((i * 7) % 11) - 5) * 0.25f;
  const TensorView ape_view = held.f32(ape);
  for (int64_t i = 0; i < T * w; ++i) x[i] = static_cast<float>(((i * 13) % 17) - 8) * 0.125f;
  // Expected latents (bf16) of groups 0..2 from the equations, in double.
  std::vector<std::vector<float>> want;
  for (int64_t j = 0; j < T / r; ++j) {
    std::vector<float> lat(n);
    for (int64_t c = 0; c < n; ++c) {
      std::vector<double> kv, sc;
      for (int64_t t = 0; t < r; ++t) {
        if (j == 0) { kv.push_back(0); sc.push_back(-INFINITY); continue; }
        const double v = x[((j - 1) * r + t) * w + c];
        kv.push_back(v);
        sc.push_back(2 * v + ape[t * w + c]);
      }
      for (int64_t t = 0; t < r; ++t) {
        const double v = x[(j * r + t) * w + n + c];
        kv.push_back(v);
        sc.push_back(2 * v + ape[t * w + n + c]);
      }
      double mx = -INFINITY, z = 0, acc = 0;
      for (double s : sc) mx = std::max(mx, s);
      for (double s : sc) z += std::exp(s - mx);
      for (size_t s = 0; s < sc.size(); ++s) acc += kv[s] * std::exp(sc[s] - mx) / z;
      lat[c] = bf16_to_f32(f64_to_bf16(acc));
    }
    want.push_back(lat);
  }
  ThreadPool pool(1);
  for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{13}, {3, 6, 4}, {5, 1, 1, 1, 5}}) {
    StreamState st;
    st.layers.resize(1);
    const int64_t cap = 16;
    st.layers[0].comp_kv.assign(cap * w, 0.0);
    st.layers[0].comp_gate.assign(cap * w, 0.0);
    PoolSpec P{&wkv, &wgate, &ape_view, static_cast<int>(r), true, cap, &LayerCache::comp_kv, &LayerCache::comp_gate};
    std::vector<std::vector<float>> got;
    int64_t at = 0;
    for (int64_t len : sizes) {
      CallCtx c;
      c.cfg = &cfg;
      c.pool = &pool;
      c.pieces.push_back(PieceCtx{&st, at, len, 0});
      c.rows = len;
      pooled_groups<double>(c, 0, P, &x[at * w], [&](StreamState&, int64_t j, float* lat) {
        EXPECT_EQ(j, static_cast<int64_t>(got.size()));
        got.emplace_back(lat, lat + n);
      });
      at += len;
    }
    ASSERT_EQ(got.size(), want.size());
    for (size_t j = 0; j < want.size(); ++j)
      for (int64_t c = 0; c < n; ++c)
        EXPECT_NEAR(got[j][c], want[j][c], std::fabs(want[j][c]) * 0x1p-7 + 1e-6) << "group " << j << " ch " << c;
  }
}

// Hash routing: experts come from tid2eid[token], weighted by the normalised unbiased scores, so
// a hash-routed layer equals the same layer routed by a bias that forces exactly those experts.
TEST(OracleV4Ops, HashRoutingEqualsForcedBias) {
  family::ModelPlan cfg;
  cfg.dim = 64; cfg.moe_inter = 32; cfg.act_block = 32;
  family::set_variant_numerics(cfg, family::Variant::v4);
  const int E = 4, K = 2;
  held_testing::HeldWeights held;
  family::LayerWeights hashed;
  std::vector<float> gate(E * 64);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = static_cast<float>((i * 5) % 9 - 4) * 0.0625f;
  hashed.gate_weight = held.bf16(E, 64, gate);
  auto fp4 = [&](int64_t out, int64_t in, int seed) {
    std::vector<float> v(out * in);
    for (int64_t i = 0; i < out * in; ++i) v[i] = e2m1_to_f32(static_cast<uint8_t>((i * 7 + seed) % 16));
    return held.fp4(out, in, v, std::vector<float>(out * in / 32, 0.125f));
  };
  for (int e = 0; e < E; ++e) hashed.experts.push_back({fp4(32, 64, e), fp4(64, 32, e + 1), fp4(32, 64, e + 2)});
  auto fp8 = [&](int64_t out, int64_t in) {
    std::vector<float> v(out * in);
    for (int64_t i = 0; i < out * in; ++i) v[i] = static_cast<float>((i * 3) % 7) - 3.0f;
    return held.fp8(out, in, 32, v, std::vector<float>(((out + 31) / 32) * ((in + 31) / 32), 0.0625f));
  };
  hashed.shared_w1 = fp8(32, 64);
  hashed.shared_w2 = fp8(64, 32);
  hashed.shared_w3 = fp8(32, 64);
  const int32_t V = 3;
  const std::vector<int64_t> table = {3, 1, 0, 2, 2, 3};  // token 0 -> {3, 1}, 1 -> {0, 2}, 2 -> {2, 3}
  hashed.tid2eid = held.i64(table, {V, K});
  std::vector<float> x(V * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 11) % 13 - 6) * 0.25f;
  const std::vector<int32_t> ids = {0, 1, 2};
  ThreadPool pool(1);
  std::vector<float> y(V * 64);
  moe_forward<float>(pool, hashed, K, cfg, x.data(), nullptr, ids.data(), V, y.data());
  for (int32_t t = 0; t < V; ++t) {
    family::LayerWeights biased = hashed;
    biased.tid2eid = {};
    std::vector<float> bias(E, 0.0f);
    bias[table[t * K]] = 1000.0f;
    bias[table[t * K + 1]] = 1000.0f;
    biased.gate_bias = held.f32(bias);
    std::vector<float> yb(64);
    moe_forward<float>(pool, biased, K, cfg, &x[t * 64], nullptr, &ids[t], 1, yb.data());
    EXPECT_EQ(yb, std::vector<float>(y.begin() + t * 64, y.begin() + (t + 1) * 64)) << "token " << t;
  }
}

// Per-head q norm on bf16 tensors: q = (3, 4, 0, 0) has mean(q^2) = 6.25 (exact), rsqrt(6.25 +
// 1e-6) rounds to bf16 0.400390625, so q -> bf16(3 * 0.400390625) = 1.203125, bf16(1.6015625).
TEST(OracleV4Ops, HeadRmsNormRoundsLikeBf16Tensors) {
  std::vector<float> q = {3, 4, 0, 0};
  head_rms_bf16<float>(q.data(), 4, 1e-6f);
  EXPECT_EQ(q, (std::vector<float>{1.203125f, 1.6015625f, 0.0f, 0.0f}));
}

// The V4 KV row: FP8 over the NoPE dims per 64 (pow2 scale), RoPE dims kept bf16; 583 + 1 pad
// bytes at d = 512 (the 584 B production row).
TEST(OracleV4Ops, NopeFp8RopeBf16Row) {
  EXPECT_EQ(kv_row_bytes(KvRowFormat::model1, 512, 64), 584);
  std::vector<float> x(128);
  for (int i = 0; i < 128; ++i) x[i] = bf16_to_f32(f32_to_bf16(0.01f * static_cast<float>(i * i % 97) - 0.3f));
  std::vector<float> y = x;
  qdq_row(KvRowFormat::model1, y.data(), 128, 64);
  for (int i = 64; i < 128; ++i) EXPECT_EQ(y[i], x[i]) << "RoPE dim " << i;
  // NoPE block: amax 0.66 -> scale 2^ceil(log2(0.66/448)) = 2^-9; e4m3 keeps 3 mantissa bits.
  for (int i = 0; i < 64; ++i) {
    const float q = y[i] * 512.0f;
    EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(q)), q) << i;
    EXPECT_LE(std::fabs(y[i] - x[i]), std::fabs(x[i]) * 0.0625f + 0x1p-18f) << i;
  }
}

}  // namespace
}  // namespace dsv4::cpu
