// The V4 / 0731 kernels against the oracle's functions (float accumulation) on random bf16 data:
// the per-head bf16 query norm (cpu::head_rms_bf16), the 584-byte KV rows (cpu::pack_row of
// KvRowFormat::model1, byte for byte), the indexer's Hadamard + FP4 QDQ
// (cpu::hadamard_row, cpu::qdq_row), the descending top-k (cpu::select_topk_desc), hash routing
// and hc_head's pre-mix (cpu::hc_head_pre), sparse attention over V4 rows on CUDA cores
// (cpu::sparse_attend_head); and rows independent of the launch's row count, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/attention.h"
#include "backends/cpu/hadamard.h"
#include "backends/cpu/head.h"
#include "backends/cpu/held_weights_testing.h"
#include "backends/cpu/kv_rows.h"
#include "backends/cpu/moe.h"
#include "backends/cpu/rope.h"
#include "backends/cuda/kernels/attention/attn_v4.cuh"
#include "backends/cuda/runtime/device_buffer.h"
#include "op_testing.h"
#include "paged_rows_testing.h"
#include "backends/cuda/kernels/block/v4_ops.cuh"

namespace dsv4::cuda {
namespace {

using gpu_testing::random_bf16;
using gpu_testing::to_device;

using gpu_testing::to_host;

// |a - b| within `ulps` bf16 units of b.
int bf16_mismatches(const std::vector<float>& a, const std::vector<float>& b, int ulps) {
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float tol = ulps * std::ldexp(1.0f, std::ilogb(std::fabs(b[i]) + 1e-30f) - 7);
    if (!(std::fabs(a[i] - b[i]) <= tol) && ++bad <= 3) ADD_FAILURE() << "[" << i << "]: " << a[i] << " vs oracle " << b[i];
  }
  return bad;
}

TEST(V4Ops, HeadRmsEqualsOracle) {
  const int64_t n = 6 * 4, hd = 512;
  auto q = random_bf16(n * hd, 1, 3.0f);
  std::vector<float> ref = q;
  for (int64_t i = 0; i < n; ++i) cpu::head_rms_bf16<float>(&ref[i * hd], hd, 1e-6f);
  auto dq = to_device(q);
  ASSERT_EQ(v4_head_rms(dq.as<float>(), n, hd, 1e-6f, nullptr), cudaSuccess);
  EXPECT_EQ(to_host<float>(dq.get(), n * hd), ref);  // the same float operations in the same order
}

TEST(V4Ops, PackedRowsEqualOracleBytes) {
  for (int64_t d : {128, 512}) {
    const int64_t rows = 5, rd = 64, rb = kv_model1_row_bytes(d, rd);
    ASSERT_EQ(rb, kv_row_bytes(KvRowFormat::model1, d, rd));
    auto x = random_bf16(rows * d, 2, 2.0f);
    x[3] = 0.0f;  // a zero group member; and one all-zero group
    for (int64_t i = 64; i < 128; ++i) x[2 * d + i] = 0.0f;
    std::vector<uint8_t> ref(rows * rb);
    std::vector<float> refv(rows * d);
    for (int64_t r = 0; r < rows; ++r) {
      cpu::pack_row(KvRowFormat::model1, &x[r * d], d, &ref[r * rb], rd);
      cpu::unpack_row(KvRowFormat::model1, &ref[r * rb], d, &refv[r * d], rd);
    }
    auto dx = to_device(x);
    DeviceBuffer dp(rows * rb);
    ASSERT_EQ(v4_pack_rows(dx.as<float>(), rows, d, rd, dp.as<uint8_t>(), nullptr), cudaSuccess);
    EXPECT_EQ(to_host<uint8_t>(dp.get(), rows * rb), ref) << "d " << d;
    EXPECT_EQ(to_host<float>(dx.get(), rows * d), refv) << "d " << d;
  }
}

TEST(V4Ops, HadamardFp4EqualsOracle) {
  const int64_t n = 9, hd = 128;
  auto x = random_bf16(n * hd, 3);
  std::vector<float> ref = x;
  for (int64_t i = 0; i < n; ++i) {
    cpu::hadamard_row<float>(&ref[i * hd], hd);
    cpu::qdq_row(KvRowFormat::fp4_ue8m0_32, &ref[i * hd], hd);
  }
  auto dx = to_device(x);
  ASSERT_EQ(v4_hadamard_fp4(dx.as<float>(), n, hd, nullptr), cudaSuccess);
  EXPECT_EQ(to_host<float>(dx.get(), n * hd), ref);
  // Known values: the rotation of e_0 is n^-0.5 everywhere (0.0884 -> bf16 0.08837890625).
  std::vector<float> e(hd, 0.0f);
  e[0] = 1.0f;
  auto de = to_device(e);
  ASSERT_EQ(v4_hadamard_fp4(de.as<float>(), 1, hd, nullptr), cudaSuccess);
  const auto he = to_host<float>(de.get(), hd);
  // FP4 QDQ of a constant group: amax 0.0884 -> scale 2^-6 (6 * 2^-6 >= amax), code 6 * 2^-6 rounds from 5.66.
  for (float v : he) EXPECT_EQ(v, 6.0f / 64.0f);
}

TEST(V4Ops, TopkDescendingEqualsOracle) {
  const int64_t rows = 6, stride = 2048, k = 8;
  const int ratio = 4;
  std::mt19937 g(4);
  std::vector<float> score(rows * stride);
  for (auto& v : score) v = static_cast<float>(static_cast<int>(g() % 7));  // many exact ties
  for (int64_t t = 0; t < stride; t += 3) score[5 * stride + t] = static_cast<float>(g() % 1000) / 8.0f;
  std::vector<int64_t> pos = {3, 10, 40, 159, 100, 8191};  // L_c = 1, 2, 10, 40, 25, 2048
  auto ds = to_device(score);
  auto dp = to_device(pos);
  DeviceBuffer dt(rows * k * 4), dw(std::max<int64_t>(1, topk_work_ints(rows, stride, k)) * 4);
  ASSERT_EQ(v4_topk_desc(ds.as<float>(), stride, dp.as<int64_t>(), rows, ratio, k, dt.as<int32_t>(), dw.as<int32_t>(),
                         nullptr), cudaSuccess);
  const auto got = to_host<int32_t>(dt.get(), rows * k);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t lc = (pos[r] + 1) / ratio;
    std::vector<float> s(score.begin() + r * stride, score.begin() + r * stride + lc);
    std::vector<int32_t> ref = cpu::select_topk_desc(s, k);
    ref.resize(k, -1);
    EXPECT_EQ(std::vector<int32_t>(got.begin() + r * k, got.begin() + (r + 1) * k), ref) << "row " << r;
  }
}

TEST(V4Ops, HashRoutingTakesTableExpertsAndNormalisedScores) {
  const int64_t rows = 4, E = 8, V = 10;
  const int K = 3;
  auto logits = random_bf16(rows * E, 5, 2.0f);
  std::vector<int32_t> tid2eid(V * K), ids = {7, 0, 7, 3};
  for (int64_t t = 0; t < V; ++t)
    for (int k = 0; k < K; ++k) tid2eid[t * K + k] = static_cast<int32_t>((t * 3 + k * 5) % E);
  auto dl = to_device(logits);
  auto dt = to_device(tid2eid);
  auto di = to_device(ids);
  DeviceBuffer ds(rows * K * 4), dw(rows * K * 4);
  ASSERT_EQ(moe_route_hash(dl.as<float>(), rows, E, K, dt.as<int32_t>(), di.as<int32_t>(), 1.5f, ds.as<int32_t>(),
                           dw.as<float>(), nullptr), cudaSuccess);
  const auto sel = to_host<int32_t>(ds.get(), rows * K);
  const auto wts = to_host<float>(dw.get(), rows * K);
  for (int64_t r = 0; r < rows; ++r) {
    double s[8], sum = 0;
    for (int k = 0; k < K; ++k) {
      const int32_t e = tid2eid[ids[r] * K + k];
      EXPECT_EQ(sel[r * K + k], e);
      s[k] = std::sqrt(cpu::softplus<double>(logits[r * E + e]));
      sum += s[k];
    }
    for (int k = 0; k < K; ++k) EXPECT_NEAR(wts[r * K + k], 1.5 * s[k] / sum, 1e-6) << r << "," << k;
  }
}

TEST(V4Ops, HcHeadPreMatchesOracle) {
  const int C = 4;
  const int64_t D = 256, rows = 3;
  family::ModelPlan cfg;
  cfg.hc_mult = C;
  cfg.dim = D;
  cfg.norm_eps = 1e-6f;
  cfg.hc_eps = 1e-6f;
  // hc_head_fn f32 [C, C*D], hc_head_base f32 [C], hc_head_scale f32 [1], stored as the checkpoint stores them.
  cpu::held_testing::HeldWeights held;
  const std::vector<float> fn_w = random_bf16(C * C * D, 6, 0.03f);
  family::Matrix fn;
  fn.weight = held.f32(fn_w);
  fn.weight.shape = {C, C * D};
  const cpu::HcHead W = cpu::hc_head_of(fn, held.f32(random_bf16(C, 7, 0.5f)), held.f32({1.25f}));
  const auto h = random_bf16(rows * C * D, 8);
  // m = fn . h per row in double (the device's fp32 linear is checked elsewhere); pre from it.
  std::vector<float> m(rows * C);
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t i = 0; i < C * D; ++i) acc += double(fn_w[c * C * D + i]) * h[r * C * D + i];
      m[r * C + c] = static_cast<float>(acc);
    }
  auto dm = to_device(m), dh = to_device(h), db = to_device(W.base);
  DeviceBuffer dp(rows * C * 4);
  ASSERT_EQ(hc_head_pre(dm.as<float>(), dh.as<float>(), rows, C, D, db.as<float>(), W.scale, cfg.norm_eps, cfg.hc_eps,
                        dp.as<float>(), nullptr), cudaSuccess);
  const auto pre = to_host<float>(dp.get(), rows * C);
  ThreadPool pool(1);
  for (int64_t r = 0; r < rows; ++r) {
    const auto ref = cpu::hc_head_pre<double>(pool, cfg, W, &h[r * C * D]);
    for (int c = 0; c < C; ++c) EXPECT_NEAR(pre[r * C + c], ref[c], 2e-6) << r << "," << c;
  }
}

// Sparse attention of one piece at positions 0..T-1 (keys: this call's rows) plus selected
// compressed V4 rows, against cpu::sparse_attend_head<float> and the inverse RoPE: the CUDA-core
// kernel (DSV4_ATTN_TC=0), which repeats the oracle's order (the default tensor-core kernel is held to
// a tolerance in attention_v4_tc_cuda_test).
TEST(V4Ops, SparseAttentionMatchesOracle) {
  const gpu_testing::ScopedSparseAttention impl(SparseAttentionImpl::cuda_core);
  const int64_t T = 70, H = 4, G = 2, d = 128, rd = 64, W = 8, n_sel = 5, n_comp = 6, rb = kv_model1_row_bytes(d, rd);
  const auto q = random_bf16(T * H * d, 9, 0.3f);
  auto kvn = random_bf16(T * d, 10);
  std::vector<uint8_t> kvp(T * rb);
  for (int64_t r = 0; r < T; ++r) {  // the window keys as the V4 path leaves them: QDQ'd
    cpu::pack_row(KvRowFormat::model1, &kvn[r * d], d, &kvp[r * rb], rd);
    cpu::unpack_row(KvRowFormat::model1, &kvp[r * rb], d, &kvn[r * d], rd);
  }
  const auto comp_vals = random_bf16(n_comp * d, 11);
  std::vector<uint8_t> comp(n_comp * rb);
  std::vector<float> comp_dec(n_comp * d);
  for (int64_t j = 0; j < n_comp; ++j) {
    cpu::pack_row(KvRowFormat::model1, &comp_vals[j * d], d, &comp[j * rb], rd);
    cpu::unpack_row(KvRowFormat::model1, &comp[j * rb], d, &comp_dec[j * d], rd);
  }
  std::vector<int32_t> sel(T * n_sel);
  for (int64_t r = 0; r < T; ++r)
    for (int64_t i = 0; i < n_sel; ++i) sel[r * n_sel + i] = i < (r % 4) + 2 ? static_cast<int32_t>((r + 3 * i) % n_comp) : -1;
  const auto sink = random_bf16(H, 12);
  const std::vector<float> freqs = cpu::rope_frequencies({64, 160000, 65536, 16, 32, 1});
  std::vector<int64_t> pos(T);
  std::vector<int32_t> row_piece(T, 0);
  for (int64_t r = 0; r < T; ++r) pos[r] = r;
  const gpu_testing::PagedRowsDev dcomp = gpu_testing::paged_rows(comp, rb, 1);  // pages of 2 rows
  DeviceBuffer ring(16 * rb);
  PieceV4 pc{0, T, 0, ring.as<uint8_t>(), dcomp.rows};
  auto dpc = to_device(std::vector<PieceV4>{pc});
  auto dq = to_device(q), dk = to_device(kvn), dsel = to_device(sel), dsink = to_device(sink), dfr = to_device(freqs);
  auto dpos = to_device(pos), drp = to_device(row_piece);
  DeviceBuffer dout(T * H * d * 4);
  const float scale = static_cast<float>(1.0 / std::sqrt(double(d)));
  ASSERT_EQ(v4_sparse_attention(dq.as<float>(), dk.as<float>(), dpc.as<PieceV4>(), drp.as<int32_t>(), dpos.as<int64_t>(), T,
                                H, d, rd, W, 16, dsel.as<int32_t>(), n_sel, dsink.as<float>(), scale, dfr.as<float>(), 32, G,
                                dout.as<float>(), nullptr), cudaSuccess);
  const auto out = to_host<float>(dout.get(), T * H * d);
  std::vector<float> got, ref;
  for (int64_t r = 0; r < T; ++r)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<const float*> keys(W, nullptr);
      for (int64_t p = std::max<int64_t>(0, r - W + 1); p <= r; ++p) keys[p - std::max<int64_t>(0, r - W + 1)] = &kvn[p * d];
      for (int64_t i = 0; i < n_sel; ++i) {
        const int32_t t = sel[r * n_sel + i];
        keys.push_back(t >= 0 ? &comp_dec[t * d] : nullptr);
      }
      std::vector<float> o(d);
      cpu::sparse_attend_head<float>(&q[(r * H + h) * d], keys, d, scale, sink[h], o.data());
      cpu::rope_apply<float>(&o[d - rd], freqs, r, true);
      ref.insert(ref.end(), o.begin(), o.end());
      const int64_t hpg = H / G, g = h / hpg, hh = h % hpg;
      const float* orow = &out[(g * T + r) * hpg * d + hh * d];
      got.insert(got.end(), orow, orow + d);
    }
  EXPECT_EQ(bf16_mismatches(got, ref, 1), 0);
  // Row 37 alone gives the same bits.
  auto dpos1 = to_device(std::vector<int64_t>{37});
  DeviceBuffer dout1(H * d * 4);
  ASSERT_EQ(v4_sparse_attention(dq.as<float>() + 37 * H * d, dk.as<float>(), dpc.as<PieceV4>(), drp.as<int32_t>(),
                                dpos1.as<int64_t>(), 1, H, d, rd, W, 16, dsel.as<int32_t>() + 37 * n_sel, n_sel,
                                dsink.as<float>(), scale, dfr.as<float>(), 32, G, dout1.as<float>(), nullptr), cudaSuccess);
  const auto one = to_host<float>(dout1.get(), H * d);
  for (int64_t h = 0; h < H; ++h) {
    const int64_t hpg = H / G, g = h / hpg, hh = h % hpg;
    EXPECT_TRUE(std::equal(one.begin() + (g * hpg + hh) * d, one.begin() + (g * hpg + hh + 1) * d,
                           out.begin() + (g * T + 37) * hpg * d + hh * d)) << "head " << h;
  }
}

}  // namespace
}  // namespace dsv4::cuda
