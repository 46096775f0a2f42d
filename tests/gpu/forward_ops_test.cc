// The forward's own CUDA kernels against the oracle's functions (ref32, float accumulation) on
// random bf16 data: RMSNorm, mHC mixes with Sinkhorn, collapse, expand, MoE routing (exact
// selections), pair order and combine, DSpark key packing, Engram (pinned and mapped tables); and rows
// independent of the launch's row count, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/held_weights_testing.h"
#include "backends/cpu/kv_rows.h"
#include "backends/cpu/mhc.h"
#include "backends/cpu/moe.h"
#include "backends/cpu/rmsnorm.h"
#include "backends/cpu/engram.h"
#include "family/deepseek_v41/layer_plan.h"
#include "backends/cpu/rope.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "backends/cuda/runtime/arena.h"
#include "backends/cuda/forward/forward_block.h"
#include "backends/cuda/model/model.h"
#include "family/deepseek_v41/preset.h"
#include "backends/cuda/kernels/block/block_ops.cuh"
#include "backends/cuda/runtime/device_buffer.h"
#include "op_testing.h"
#include "backends/cuda/kernels/block/dspark_ops.cuh"

namespace dsv4::cuda {
namespace {

using gpu_testing::random_bf16;
using gpu_testing::to_device;

template <typename T>
std::vector<T> to_host(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost);
  return v;
}

// |a - b| within `ulps` bf16 units of b (values are bf16; sums in another order may round apart).
void expect_bf16_close(const std::vector<float>& a, const std::vector<float>& b, int ulps, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float tol = ulps * std::ldexp(1.0f, std::ilogb(std::fabs(b[i]) + 1e-30f) - 7);
    if (!(std::fabs(a[i] - b[i]) <= tol) && ++bad <= 3)
      ADD_FAILURE() << what << "[" << i << "]: " << a[i] << " vs oracle " << b[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST(ForwardOps, RmsNormMatchesOracleAndRowsAreIndependent) {
  const int64_t rows = 7, n = 1280;
  const auto x = random_bf16(rows * n, 1), w = random_bf16(n, 2);
  std::vector<float> ref(rows * n);
  cpu::rmsnorm_rows<float>(x.data(), rows, n, w.data(), 1e-6f, ref.data());
  auto dx = to_device(x), dw = to_device(w);
  DeviceBuffer dy(rows * n * 4);
  ASSERT_EQ(rmsnorm_rows(dx.as<float>(), rows, n, dw.as<float>(), 1e-6f, dy.as<float>(), nullptr), cudaSuccess);
  const auto y = to_host<float>(dy, rows * n);
  expect_bf16_close(y, ref, 1, "rmsnorm");
  // Row 3 alone gives the same bits as within 7 rows.
  DeviceBuffer d1(n * 4);
  ASSERT_EQ(rmsnorm_rows(dx.as<float>() + 3 * n, 1, n, dw.as<float>(), 1e-6f, d1.as<float>(), nullptr), cudaSuccess);
  const auto y1 = to_host<float>(d1, n);
  EXPECT_TRUE(std::equal(y1.begin(), y1.end(), y.begin() + 3 * n));
}

// The row norms spread a few rows over many blocks (each recomputes the row's statistic in the
// one-block order) and run one block per row in large launches or in place: every row's bits are
// the same either way. Widths: one slot per thread, several (not a multiple of the block), and past
// the held slots (the tail path), each against the oracle too.
TEST(ForwardOps, RowNormsEqualAcrossBlockSpreads) {
  const int C = 4, nm = C * (C + 2);
  for (int64_t D : {256, 1280, 6700}) {
    SCOPED_TRACE(D);
    const int64_t rows = 300;  // one block per row
    const auto x = random_bf16(rows * D, 31), w = random_bf16(D, 32);
    std::vector<float> ref(rows * D);
    cpu::rmsnorm_rows<float>(x.data(), rows, D, w.data(), 1e-6f, ref.data());
    auto dx = to_device(x), dw = to_device(w), dinp = to_device(x);
    DeviceBuffer dy(rows * D * 4), d1(D * 4);
    ASSERT_EQ(rmsnorm_rows(dx.as<float>(), rows, D, dw.as<float>(), 1e-6f, dy.as<float>(), nullptr), cudaSuccess);
    ASSERT_EQ(rmsnorm_rows(dinp.as<float>(), rows, D, dw.as<float>(), 1e-6f, dinp.as<float>(), nullptr), cudaSuccess);
    const auto y = to_host<float>(dy, rows * D);
    expect_bf16_close(y, ref, 1, "rmsnorm");
    EXPECT_TRUE(to_host<float>(dinp, rows * D) == y) << "in place";
    for (int64_t r : {0, 171, 299}) {  // alone: spread over one block per slot
      ASSERT_EQ(rmsnorm_rows(dx.as<float>() + r * D, 1, D, dw.as<float>(), 1e-6f, d1.as<float>(), nullptr),
                cudaSuccess);
      const auto y1 = to_host<float>(d1, D);
      EXPECT_TRUE(std::equal(y1.begin(), y1.end(), y.begin() + r * D)) << "row " << r << " alone";
    }
    const auto h = random_bf16(rows * C * D, 33);
    const auto mix = random_bf16(rows * nm, 34, 0.7f);
    auto dh = to_device(h), dmix = to_device(mix);
    DeviceBuffer x0(rows * D * 4), y0(rows * D * 4), xa(D * 4), ya(D * 4);
    ASSERT_EQ(hc_collapse_rmsnorm(dh.as<float>(), dmix.as<float>(), nm, rows, C, D, dw.as<float>(), 1e-6f,
                                  x0.as<float>(), y0.as<float>(), nullptr),
              cudaSuccess);
    const auto xs = to_host<float>(x0, rows * D), ys = to_host<float>(y0, rows * D);
    for (int64_t r : {0, 171, 299}) {
      ASSERT_EQ(hc_collapse_rmsnorm(dh.as<float>() + r * C * D, dmix.as<float>() + r * nm, nm, 1, C, D,
                                    dw.as<float>(), 1e-6f, xa.as<float>(), ya.as<float>(), nullptr),
                cudaSuccess);
      const auto x1 = to_host<float>(xa, D), y1 = to_host<float>(ya, D);
      EXPECT_TRUE(std::equal(x1.begin(), x1.end(), xs.begin() + r * D)) << "collapse, row " << r << " alone";
      EXPECT_TRUE(std::equal(y1.begin(), y1.end(), ys.begin() + r * D)) << "norm, row " << r << " alone";
    }
    // The collapse against the oracle's (one row): bf16(sum_c pre_c h_c), within a bf16 step.
    std::vector<float> cref(D);
    const std::vector<float> pre(mix.begin() + 171 * nm, mix.begin() + 171 * nm + C);
    cpu::hc_collapse<float>(h.data() + 171 * C * D, C, D, pre, cref.data());
    expect_bf16_close(std::vector<float>(xs.begin() + 171 * D, xs.begin() + 172 * D), cref, 1, "collapse");
  }
}

TEST(ForwardOps, MixesCollapseExpandMatchOracle) {
  const int C = 4;
  const int64_t rows = 3, D = 256, nm = C * (C + 2);
  const auto h = random_bf16(rows * C * D, 3);
  const auto m = random_bf16(rows * nm, 4, 30.0f);  // un-normalised GEMV outputs
  const auto base = random_bf16(nm, 5, 0.5f);
  const float s0 = 0.25f, s1 = 0.5f, s2 = 0.75f;
  // The oracle's coefficients from the same m: its hc_mixes with fn = I-like selection is not
  // needed; form the same per-row values as cpu::hc_mixes after its f32_linear.
  std::vector<float> ref_mix(rows * nm);
  for (int64_t r = 0; r < rows; ++r) {
    const float mean = cpu::dot<float>(&h[r * C * D], &h[r * C * D], C * D) / static_cast<float>(C * D);
    const float rho = 1.0f / std::sqrt(mean + 1e-6f);
    std::vector<float> mr(&m[r * nm], &m[(r + 1) * nm]);
    for (auto& v : mr) v = v * rho;
    float* o = &ref_mix[r * nm];
    for (int j = 0; j < C; ++j) {
      o[j] = cpu::sigmoid<float>(mr[j] * s0 + base[j]) + 1e-6f;
      o[C + j] = 2.0f * cpu::sigmoid<float>(mr[C + j] * s1 + base[C + j]);
    }
    for (int i = 0; i < C * C; ++i) o[2 * C + i] = mr[2 * C + i] * s2 + base[2 * C + i];
    cpu::sinkhorn<float>(o + 2 * C, C, 20, 1e-6f);
  }
  auto dh = to_device(h), dm = to_device(m), db = to_device(base);
  DeviceBuffer dmix(rows * nm * 4);
  ASSERT_EQ(hc_mix_coefficients(dm.as<float>(), dh.as<float>(), rows, C, D, db.as<float>(), s0, s1, s2, 1e-6f, 1e-6f,
                                20, dmix.as<float>(), nullptr),
            cudaSuccess);
  const auto mix = to_host<float>(dmix, rows * nm);
  for (int64_t i = 0; i < rows * nm; ++i) EXPECT_NEAR(mix[i], ref_mix[i], 2e-5f * (1 + std::fabs(ref_mix[i]))) << i;
  // Collapse with pre, expand with y, both against the oracle with the GPU's coefficients.
  DeviceBuffer dy(rows * D * 4);
  ASSERT_EQ(hc_collapse(dh.as<float>(), dmix.as<float>(), nm, rows, C, D, dy.as<float>(), nullptr), cudaSuccess);
  const auto y = to_host<float>(dy, rows * D);
  std::vector<float> ref_y(rows * D), h2 = h;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> pre(&mix[r * nm], &mix[r * nm + C]);
    cpu::hc_collapse<float>(&h[r * C * D], C, D, pre, &ref_y[r * D]);
    cpu::HcMix<float> mx{pre, std::vector<float>(&mix[r * nm + C], &mix[r * nm + 2 * C]),
                         std::vector<float>(&mix[r * nm + 2 * C], &mix[(r + 1) * nm])};
    cpu::hc_expand<float>(&ref_y[r * D], &h2[r * C * D], C, D, mx);
  }
  expect_bf16_close(y, ref_y, 1, "collapse");
  ASSERT_EQ(hc_expand(dy.as<float>(), dmix.as<float>(), rows, C, D, dh.as<float>(), nullptr), cudaSuccess);
  expect_bf16_close(to_host<float>(dh, rows * C * D), h2, 1, "expand");
}

TEST(ForwardOps, MoeRoutingPairsAndCombine) {
  const int64_t rows = 9, E = 64, D = 128;
  const int K = 6;
  auto logits = random_bf16(rows * E, 6, 2.0f);
  logits[2 * E + 5] = logits[2 * E + 9];  // a tie: the lower expert wins
  const auto bias = random_bf16(E, 7, 0.1f);
  auto dl = to_device(logits), dbias = to_device(bias);
  DeviceBuffer sel(rows * K * 4), wts(rows * K * 4), prow(rows * K * 4), pexp(rows * K * 4), pw(rows * K * 4),
      pof(rows * K * 4);
  ASSERT_EQ(moe_route(dl.as<float>(), rows, E, K, dbias.as<float>(), dbias.as<float>(), nullptr, 1.5f,
                      sel.as<int32_t>(), wts.as<float>(), nullptr),
            cudaSuccess);
  DeviceBuffer pscratch(moe_pairs_scratch(rows, K, E) * 4);
  ASSERT_EQ(moe_pairs(sel.as<int32_t>(), wts.as<float>(), rows, K, E, prow.as<int32_t>(), pexp.as<int32_t>(),
                      pw.as<float>(), pof.as<int32_t>(), pscratch.as<int32_t>(), nullptr),
            cudaSuccess);
  const auto s = to_host<int32_t>(sel, rows * K);
  const auto w = to_host<float>(wts, rows * K);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> sc(E), biased(E);
    for (int64_t e = 0; e < E; ++e) {
      sc[e] = std::sqrt(cpu::softplus<float>(logits[r * E + e]));
      biased[e] = sc[e] + bias[e];
    }
    const auto ref = cpu::topk_desc(biased.data(), static_cast<int>(E), K);
    float sum = 0;
    for (int e : ref) sum += sc[e];
    for (int j = 0; j < K; ++j) {
      EXPECT_EQ(s[r * K + j], ref[j]) << "row " << r << " slot " << j;
      EXPECT_NEAR(w[r * K + j], sc[ref[j]] / (sum + 1e-20f) * 1.5f, 1e-6f);
    }
  }
  // Pairs sorted by (expert, row), each (row, slot) pointing at its pair.
  const auto pr = to_host<int32_t>(prow, rows * K), pe = to_host<int32_t>(pexp, rows * K), po = to_host<int32_t>(pof, rows * K);
  for (int64_t p = 1; p < rows * K; ++p)
    EXPECT_TRUE(pe[p - 1] < pe[p] || (pe[p - 1] == pe[p] && pr[p - 1] < pr[p])) << p;
  for (int64_t i = 0; i < rows * K; ++i) {
    EXPECT_EQ(pr[po[i]], i / K);
    EXPECT_EQ(pe[po[i]], s[i]);
  }
  // Combine: ascending expert order per row, + shared, -> bf16 (cpu::moe_forward's order).
  const auto outs = random_bf16(rows * K * D, 8), shared = random_bf16(rows * D, 9);
  auto dout = to_device(outs), dsh = to_device(shared);
  DeviceBuffer dy(rows * D * 4);
  ASSERT_EQ(moe_combine(dout.as<float>(), dsh.as<float>(), sel.as<int32_t>(), pof.as<int32_t>(), rows, K, D,
                        dy.as<float>(), nullptr),
            cudaSuccess);
  const auto y = to_host<float>(dy, rows * D);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int> order(s.begin() + r * K, s.begin() + (r + 1) * K);
    std::vector<int> idx(K);
    for (int j = 0; j < K; ++j) idx[j] = j;
    std::sort(idx.begin(), idx.end(), [&](int a, int b) { return order[a] < order[b]; });
    for (int64_t d = 0; d < D; ++d) {
      float acc = 0;
      for (int j : idx) acc += outs[static_cast<int64_t>(po[r * K + j]) * D + d];
      EXPECT_EQ(y[r * D + d], cpu::round_bf16(acc + shared[r * D + d])) << r << "," << d;
    }
  }
}

// The fused launches equal their parts bit for bit: hc_collapse_rmsnorm == hc_collapse then
// rmsnorm_rows, moe_combine_expand == moe_combine, hc_expand, hc_take_pre, moe_route_pairs ==
// moe_route then moe_pairs (the parts are checked against the oracle above; fusing must not move
// a rounding point).
TEST(ForwardOps, FusedLaunchesEqualTheirParts) {
  const int64_t rows = 5, D = 640, E = 32;  // D not a multiple of the block width
  const int C = 4, K = 6, nm = C * (C + 2);
  const auto h = random_bf16(rows * C * D, 21), w = random_bf16(D, 22, 0.5f);
  auto mix = random_bf16(rows * nm, 23, 0.7f);
  auto dh = to_device(h), dw = to_device(w), dmix = to_device(mix);
  DeviceBuffer x1(rows * D * 4), y1(rows * D * 4), x2(rows * D * 4), y2(rows * D * 4);
  ASSERT_EQ(hc_collapse(dh.as<float>(), dmix.as<float>(), nm, rows, C, D, x1.as<float>(), nullptr), cudaSuccess);
  ASSERT_EQ(rmsnorm_rows(x1.as<float>(), rows, D, dw.as<float>(), 1e-6f, y1.as<float>(), nullptr), cudaSuccess);
  ASSERT_EQ(hc_collapse_rmsnorm(dh.as<float>(), dmix.as<float>(), nm, rows, C, D, dw.as<float>(), 1e-6f,
                                x2.as<float>(), y2.as<float>(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(to_host<float>(x1, rows * D) == to_host<float>(x2, rows * D)) << "collapse part";
  EXPECT_TRUE(to_host<float>(y1, rows * D) == to_host<float>(y2, rows * D)) << "rmsnorm part";
  // Combine + expand + pre-mix: K distinct experts per row, pairs a fixed permutation.
  std::vector<int32_t> sel(rows * K), pair_of(rows * K);
  for (int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < K; ++j) sel[r * K + j] = static_cast<int32_t>((r * 7 + (K - j) * 5) % E);
  for (int64_t i = 0; i < rows * K; ++i) pair_of[i] = static_cast<int32_t>((i * 11 + 3) % (rows * K));
  const auto outs = random_bf16(rows * K * D, 24), shared = random_bf16(rows * D, 25);
  auto dsel = to_device(sel), dpof = to_device(pair_of), dout = to_device(outs), dsh = to_device(shared);
  auto h1 = to_device(h), h2 = to_device(h);
  DeviceBuffer y(rows * D * 4), pi1(rows * C * 4), pi2(rows * C * 4);
  ASSERT_EQ(moe_combine(dout.as<float>(), dsh.as<float>(), dsel.as<int32_t>(), dpof.as<int32_t>(), rows, K, D,
                        y.as<float>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(hc_expand(y.as<float>(), dmix.as<float>(), rows, C, D, h1.as<float>(), nullptr), cudaSuccess);
  ASSERT_EQ(hc_take_pre(dmix.as<float>(), rows, C, pi1.as<float>(), nullptr), cudaSuccess);
  ASSERT_EQ(moe_combine_expand(dout.as<float>(), dsh.as<float>(), dsel.as<int32_t>(), dpof.as<int32_t>(), rows, K, D,
                               dmix.as<float>(), C, h2.as<float>(), pi2.as<float>(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(to_host<float>(h1, rows * C * D) == to_host<float>(h2, rows * C * D)) << "combine + expand";
  const auto p2 = to_host<float>(pi2, rows * C);
  EXPECT_TRUE(to_host<float>(pi1, rows * C) == p2) << "pre-mix";
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < C; ++c) EXPECT_EQ(p2[r * C + c], mix[r * nm + c]);  // the pre part, copied
  // Router selection + pair sort in one launch == moe_route then moe_pairs (with a tie and image rows).
  const int64_t E2 = 64;
  auto logits = random_bf16(rows * E2, 26, 2.0f);
  logits[E2 + 3] = logits[E2 + 40];
  const auto bias = random_bf16(E2, 27, 0.1f), bias_vl = random_bf16(E2, 28, 0.1f);
  const std::vector<uint8_t> image = {0, 1, 0, 0, 1};
  auto dl = to_device(logits), db = to_device(bias), dbv = to_device(bias_vl), dimg = to_device(image);
  std::vector<DeviceBuffer> one, two;
  for (int i = 0; i < 6; ++i) {
    one.emplace_back(rows * K * 4);
    two.emplace_back(rows * K * 4);
  }
  ASSERT_EQ(moe_route(dl.as<float>(), rows, E2, K, db.as<float>(), dbv.as<float>(), dimg.as<uint8_t>(), 2.5f,
                      one[0].as<int32_t>(), one[1].as<float>(), nullptr),
            cudaSuccess);
  DeviceBuffer pscratch(moe_pairs_scratch(rows, K, E2) * 4);
  ASSERT_EQ(moe_pairs(one[0].as<int32_t>(), one[1].as<float>(), rows, K, E2, one[2].as<int32_t>(), one[3].as<int32_t>(),
                      one[4].as<float>(), one[5].as<int32_t>(), pscratch.as<int32_t>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(moe_route_pairs(dl.as<float>(), rows, E2, K, db.as<float>(), dbv.as<float>(), dimg.as<uint8_t>(), 2.5f,
                            two[0].as<int32_t>(), two[1].as<float>(), two[2].as<int32_t>(), two[3].as<int32_t>(),
                            two[4].as<float>(), two[5].as<int32_t>(), nullptr),
            cudaSuccess);
  const char* names[6] = {"sel", "wts", "pair_row", "pair_expert", "pair_weight", "pair_of"};
  for (int i = 0; i < 6; ++i)  // bytes compared (int and float outputs alike)
    EXPECT_TRUE(to_host<uint32_t>(one[i], rows * K) == to_host<uint32_t>(two[i], rows * K)) << names[i];
}

TEST(ForwardOps, DsparkKeyPackingMatchesOracleRows) {
  const int64_t rows = 4, d = 512;
  const int rd = 64;
  const auto kn = random_bf16(rows * d, 10);
  cpu::RopeParams plain{rd, 10000.0, 0, 16, 32, 1};
  const auto freqs = cpu::rope_frequencies(plain);
  std::vector<int64_t> pos = {0, 5, 130, 70000};
  auto dk = to_device(kn), df = to_device(freqs), dp = to_device(pos);
  const int64_t rb = kv_row_bytes(KvRowFormat::fp8_ue8m0_32, d), cap = 144;
  DeviceBuffer ring(cap * rb), qdq(rows * d * 4);
  cudaMemset(ring.get(), 0, cap * rb);
  ASSERT_EQ(dspark_pack_keys(dk.as<float>(), df.as<float>(), dp.as<int64_t>(), 0, rows, d, rd, cap, ring.as<uint8_t>(),
                             qdq.as<float>(), nullptr),
            cudaSuccess);
  const auto ring_h = to_host<uint8_t>(ring, cap * rb);
  const auto q = to_host<float>(qdq, rows * d);
  int differing_bytes = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> k(&kn[r * d], &kn[(r + 1) * d]);
    cpu::rope_apply<float>(&k[d - rd], freqs, pos[r], false);
    std::vector<uint8_t> ref(rb);
    cpu::pack_row(KvRowFormat::fp8_ue8m0_32, k.data(), d, ref.data());
    for (int64_t i = 0; i < rb; ++i) differing_bytes += ref[i] != ring_h[(pos[r] % cap) * rb + i];
    std::vector<float> back(d);
    cpu::unpack_row(KvRowFormat::fp8_ue8m0_32, &ring_h[(pos[r] % cap) * rb], d, back.data());
    EXPECT_TRUE(std::equal(back.begin(), back.end(), q.begin() + r * d)) << "qdq values differ from the packed row";
  }
  // cos/sin of the device may differ from the host's in the last bit for a few pairs.
  EXPECT_LE(differing_bytes, static_cast<int>(rows * rb / 50)) << "packed rows differ beyond RoPE rounding";
}

// The fused mixes (fp32 GEMV in fixed K-slices with the row statistics, then Sinkhorn) against
// cpu::hc_mixes<float>; a row's coefficients do not depend on the launch's row count.
TEST(ForwardOps, FusedMixesMatchOracle) {
  const int C = 4;
  const int64_t rows = 5, D = 512, n = C * D, nm = C * (C + 2);
  cpu::held_testing::HeldWeights held;  // hc_X_fn f32 [nm, C*D], stored as the checkpoint stores it
  const std::vector<float> fn_w = random_bf16(nm * n, 21, 0.02f);
  family::Matrix fn;
  fn.weight = held.f32(fn_w);
  fn.weight.shape = {nm, n};
  cpu::HcParams P;
  P.fn = &fn;
  P.base = random_bf16(nm, 22, 0.5f);
  P.scale = {0.3f, 0.6f, 0.9f};
  const auto h = random_bf16(rows * n, 23);
  ThreadPool pool(1);
  const auto ref = cpu::hc_mixes<float>(pool, h.data(), rows, C, D, P, 1e-6f, 1e-6f, 20);
  auto dh = to_device(h), dfn = to_device(fn_w), db = to_device(P.base);
  DeviceBuffer part(rows * kHcSplits * (nm + 1) * 4), mix(rows * nm * 4), mix1(nm * 4);
  ASSERT_EQ(hc_mix_partials(dh.as<float>(), dfn.as<float>(), rows, C, D, part.as<float>(), nullptr), cudaSuccess);
  ASSERT_EQ(hc_mix_from_partials(part.as<float>(), rows, C, D, db.as<float>(), 0.3f, 0.6f, 0.9f, 1e-6f, 1e-6f, 20,
                                 mix.as<float>(), nullptr),
            cudaSuccess);
  const auto m = to_host<float>(mix, rows * nm);
  for (int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < C; ++j) {
      EXPECT_NEAR(m[r * nm + j], ref[r].pre[j], 1e-5f);
      EXPECT_NEAR(m[r * nm + C + j], ref[r].post[j], 1e-5f);
      for (int k = 0; k < C; ++k) EXPECT_NEAR(m[r * nm + 2 * C + j * C + k], ref[r].A[j * C + k], 1e-5f);
    }
  // Row 2 alone.
  ASSERT_EQ(hc_mix_partials(dh.as<float>() + 2 * n, dfn.as<float>(), 1, C, D, part.as<float>(), nullptr), cudaSuccess);
  ASSERT_EQ(hc_mix_from_partials(part.as<float>(), 1, C, D, db.as<float>(), 0.3f, 0.6f, 0.9f, 1e-6f, 1e-6f, 20,
                                 mix1.as<float>(), nullptr),
            cudaSuccess);
  const auto m1 = to_host<float>(mix1, nm);
  EXPECT_TRUE(std::equal(m1.begin(), m1.end(), m.begin() + 2 * nm));
}

// moe_pairs over many chunks of entries (3,000 rows x 6 slots, 384 experts, a few entries out of range)
// against the definition computed on the host: for each expert in order, its entries in entry order.
TEST(ForwardOps, PairsOfManyRowsFollowTheirDefinition) {
  const int64_t rows = 3000, E = 384;
  const int K = 6;
  const int64_t n = rows * K;
  std::mt19937 rng(91);
  std::vector<int32_t> sel(n);
  std::vector<float> wts(n);
  for (int64_t i = 0; i < n; ++i) {
    sel[i] = static_cast<int32_t>(rng() % (i % 97 == 0 ? 40 : E));  // crowded low experts too
    wts[i] = static_cast<float>(rng() % 1000) / 1000.0f;
  }
  sel[5] = -1, sel[n - 2] = static_cast<int32_t>(E);  // left out
  std::vector<int32_t> want_row, want_expert, want_of(n, -7);
  std::vector<float> want_weight;
  for (int32_t e = 0; e < E; ++e)
    for (int64_t i = 0; i < n; ++i)
      if (sel[i] == e) {
        want_of[i] = static_cast<int32_t>(want_row.size());
        want_row.push_back(static_cast<int32_t>(i / K));
        want_expert.push_back(e);
        want_weight.push_back(wts[i]);
      }
  const DeviceBuffer dsel = to_device(sel), dw = to_device(wts);
  DeviceBuffer prow(n * 4), pexp(n * 4), pw(n * 4), pof(n * 4), scratch(moe_pairs_scratch(rows, K, E) * 4);
  const std::vector<int32_t> poison(n, -7);
  cudaMemcpy(pof.get(), poison.data(), n * 4, cudaMemcpyHostToDevice);
  ASSERT_EQ(moe_pairs(dsel.as<int32_t>(), dw.as<float>(), rows, K, E, prow.as<int32_t>(), pexp.as<int32_t>(),
                      pw.as<float>(), pof.as<int32_t>(), scratch.as<int32_t>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const size_t placed = want_row.size();
  ASSERT_EQ(placed, static_cast<size_t>(n - 2));
  const auto got_row = to_host<int32_t>(prow, placed), got_expert = to_host<int32_t>(pexp, placed);
  const auto got_weight = to_host<float>(pw, placed);
  const auto got_of = to_host<int32_t>(pof, n);
  EXPECT_EQ(got_row, want_row);
  EXPECT_EQ(got_expert, want_expert);
  EXPECT_EQ(std::memcmp(got_weight.data(), want_weight.data(), placed * 4), 0);
  EXPECT_EQ(got_of, want_of);
}

// hc_mix_partials follows the arithmetic block_ops.cuh defines, bit for bit, on both of its kernels (a launch of
// 100 rows takes the row-tiled kernel, a launch of one row the per-value one): the host below performs the
// same operations in the same order (per thread t of 256: FMAs over its elements t, t + 256, ... of the
// slice from +0; the butterfly over 32 lanes; the butterfly over the 8 warp totals padded with +0 lanes).
float host_butterfly(std::vector<float> v) {  // 32 lanes: lane 0's value after offsets 16, 8, 4, 2, 1
  for (int o = 16; o > 0; o >>= 1) {
    std::vector<float> next(32);
    for (int l = 0; l < 32; ++l) next[l] = v[l] + v[l ^ o];
    v = next;
  }
  return v[0];
}

TEST(ForwardOps, MixPartialsFollowTheirDefinitionOnBothKernels) {
  const int C = 4, nm = C * (C + 2);
  for (const int64_t D : {int64_t{5120}, int64_t{4096}, int64_t{256}}) {
    SCOPED_TRACE("D=" + std::to_string(D));
    const int64_t rows = 100, n = C * D, len = n / kHcSplits;
    const std::vector<float> h = random_bf16(rows * n, uint32_t(31 + D), 1.5f);
    const std::vector<float> fn = random_bf16(nm * n, uint32_t(37 + D), 0.02f);
    const DeviceBuffer dh = to_device(h), dfn = to_device(fn);
    const int64_t per_row = kHcSplits * (nm + 1);
    DeviceBuffer all(rows * per_row * 4), one(per_row * 4);
    cudaMemset(all.get(), 0xFF, all.bytes());
    ASSERT_EQ(hc_mix_partials(dh.as<float>(), dfn.as<float>(), rows, C, D, all.as<float>(), nullptr), cudaSuccess);
    const std::vector<float> got = to_host<float>(all, rows * per_row);
    for (const int64_t r : {int64_t{0}, int64_t{41}, rows - 1}) {
      ASSERT_EQ(hc_mix_partials(dh.as<float>() + r * n, dfn.as<float>(), 1, C, D, one.as<float>(), nullptr),
                cudaSuccess);
      const std::vector<float> alone = to_host<float>(one, per_row);
      ASSERT_EQ(std::memcmp(alone.data(), &got[r * per_row], per_row * 4), 0) << "row " << r << " alone";
      for (int64_t sl = 0; sl < kHcSplits; ++sl)
        for (int j = 0; j <= nm; ++j) {
          std::vector<float> warp_total(8);
          for (int wp = 0; wp < 8; ++wp) {
            std::vector<float> lanes(32);
            for (int l = 0; l < 32; ++l) {
              float acc = 0.0f;
              for (int64_t o = 32 * wp + l; o < len; o += 256) {
                const float hv = h[r * n + sl * len + o];
                acc = std::fma(hv, j < nm ? fn[j * n + sl * len + o] : hv, acc);
              }
              lanes[l] = acc;
            }
            warp_total[wp] = host_butterfly(lanes);
          }
          std::vector<float> padded(32, 0.0f);
          for (int wp = 0; wp < 8; ++wp) padded[wp] = warp_total[wp];
          const float want = host_butterfly(padded), have = got[r * per_row + sl * (nm + 1) + j];
          ASSERT_EQ(std::memcmp(&want, &have, 4), 0)
              << "row " << r << " slice " << sl << " value " << j << ": " << have << " vs " << want;
        }
    }
  }
}

// Engram of the tiny and small presets' first Engram layer (wkv FP8 linear, gate) against
// cpu::engram_apply<float> on random streams, with the table rows read by the kernel from the pinned table, and
// gathered by the host from the mapped one (as the forward gathers them for a call).
TEST(ForwardOps, EngramMatchesOracle) {
  for (auto preset : {family::Preset::tiny, family::Preset::small}) {
    SCOPED_TRACE(std::string(family::preset_name(preset)));
    auto w = family::synthetic_weights(family::preset_config(preset, family::Variant::v41), 1, false);
    const family::ModelPlan cfg = family::build_plan(w->config);
    const int layer = cfg.engram_layers[0];
    const family::LayerWeights& E = w->weights.layers[layer];
    const int C = cfg.hc_mult;
    const int64_t D = cfg.dim, rows = 5, R = w->engram.cols, table_size = E.engram_table.dim(0);
    auto h = random_bf16(rows * C * D, 11);
    std::vector<int64_t> table_rows(rows * R);
    for (int64_t i = 0; i < rows * R; ++i) table_rows[i] = (i * 7919 + 3) % table_size;
    std::vector<float> ref = h;
    ThreadPool pool(1);
    cpu::engram_apply<float>(pool, E, R, table_rows.data(), nullptr, rows, C, D, cfg.norm_eps, cfg.act_block,
                             ref.data());
    for (const bool pinned : {true, false}) {
      SCOPED_TRACE(pinned ? "pinned table" : "mapped table, rows gathered on the host");
      ModelDeviceOptions mo;
      mo.pin_engram = pinned;
      auto m = ModelDevice::upload(w, mo);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      const EngramDevice& ED = *(*m)->layers[layer].engram;
      ASSERT_EQ(ED.codes != nullptr, pinned);
      std::vector<int64_t> index = table_rows;
      std::vector<uint8_t> codes, scales;
      if (!ED.codes) {  // the hashed rows in call order; the kernel then reads rows 0..n-1 of the gathered arrays
        const int64_t dim = ED.dim, sdim = dim / 32, n = static_cast<int64_t>(index.size());
        codes.resize(n * dim);
        scales.resize(n * sdim);
        for (int64_t i = 0; i < n; ++i) {
          std::memcpy(&codes[i * dim], ED.table.bytes() + index[i] * dim, dim);
          std::memcpy(&scales[i * sdim], ED.table_scale.bytes() + index[i] * sdim, sdim);
          index[i] = i;
        }
      }
      Arena scratch(size_t{64} << 20);
      OpCtx o{&(*m)->config, nullptr, &scratch};
      auto dh = to_device(h), dr = to_device(index), dc = to_device(codes), ds = to_device(scales);
      Status st = engram_forward(o, ED, ED.codes ? ED.codes : dc.as<uint8_t>(), ED.codes ? ED.scales : ds.as<uint8_t>(),
                                 dr.as<int64_t>(), rows, dh.as<float>());
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      expect_bf16_close(to_host<float>(dh, rows * C * D), ref, 2, "engram");
    }
  }
}

}  // namespace
}  // namespace dsv4::cuda
