// Index scores: the tensor-core kernel (int8 MMAs over tiles of keys shared by 8 rows) against the
// dp4a kernel, bit for bit over the whole score buffer (nothing written past a row's L_c), and both
// against the oracle's formula. Shapes: 1 to a few hundred rows, up to a few thousand compressed
// rows, ratio 1 and 2, 32 and 64 heads, head dims 32/64/128, rows of one piece or interleaved rows
// of several pieces; keys and queries on the tensor-core kernel's integer path, on the dp4a
// kernel's integer path only (group scales spanning 4..9 binades, scales far from 1), on the fp32
// path (wider spans, extreme UE8M0 bytes, raw bf16 query groups, subnormal queries), all-zero query
// groups and heads, all-zero key groups, non-finite weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "attention_testing.h"
#include "paged_rows_testing.h"
#include "backends/cpu/linear.h"
#include "backends/cpu/numerics.h"
#include "backends/cuda/kernels/attention/attention_kernels.cuh"
#include "core/fp4.h"
#include "core/quant.h"
#include "core/ue8m0.h"

namespace dsv4::cuda {
namespace {

using gpu_testing::bits_of;

struct Case {
  int64_t rows, ctx;  // rows at positions ctx - rows .. ctx - 1 (each piece's own chunk)
  int ratio;
  int64_t IH, ihd;
  int pieces;         // row r belongs to piece r % pieces
  bool special;       // non-finite weights in some rows (not checked against the oracle)
};

// Random index-key rows (ihd/2 code bytes + ihd/32 UE8M0 bytes) of several kinds.
std::vector<uint8_t> make_keys(int64_t n, int64_t ihd, std::mt19937& g) {
  const int64_t G = ihd / 32, rb = ihd / 2 + G;
  std::vector<uint8_t> keys(n * rb);
  for (int64_t t = 0; t < n; ++t) {
    uint8_t* row = &keys[t * rb];
    for (int64_t i = 0; i < ihd / 2; ++i) row[i] = static_cast<uint8_t>(g());
    const int kind = static_cast<int>(g() % 100);
    const int base = 118 + static_cast<int>(g() % 8);
    for (int64_t j = 0; j < G; ++j) {
      int b = base;
      if (kind < 70) b += static_cast<int>(g() % 4);                 // span <= 3: tensor-core integer path
      else if (kind < 82) b += static_cast<int>(g() % 10);           // span <= 9: dp4a integer path
      else if (kind < 88) b = j == 0 ? 140 + static_cast<int>(g() % 10) : b;  // span > 9: fp32 path
      else if (kind < 91) b = 40 + static_cast<int>(g() % 3);        // 2^-88: off the tensor-core path
      else if (kind < 94) b = 200 + static_cast<int>(g() % 3);       // 2^72: off the tensor-core path
      else if (kind < 96) b = j == G - 1 ? 0 : b;                    // 2^-127
      else if (kind < 98) b = j == 0 ? 250 : b;                      // 2^123
      row[ihd / 2 + j] = static_cast<uint8_t>(b);
    }
    if (g() % 16 == 0) {  // an all-zero group of codes (0 or -0)
      const int64_t j = static_cast<int64_t>(g() % G);
      for (int64_t i = 0; i < 16; ++i) row[16 * j + i] = (g() % 2) ? 0x00 : 0x88;
    }
  }
  return keys;
}

// FP4/UE8M0-32 QDQ'd queries [rows, IH, ihd] with a head's kind drawn per (row, head).
std::vector<float> make_queries(int64_t rows, int64_t IH, int64_t ihd, std::mt19937& g) {
  const int64_t G = ihd / 32;
  std::vector<float> q(rows * IH * ihd);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < IH; ++h) {
      const int kind = static_cast<int>(g() % 100);
      const int head_exp = static_cast<int>(g() % 9) - 4;
      for (int64_t j = 0; j < G; ++j) {
        float* x = &q[((r * IH + h) * ihd) + 32 * j];
        int e = head_exp;
        if (kind >= 70 && kind < 80) e = static_cast<int>(g() % 9) - 4;   // groups spanning up to 8 binades
        else if (kind >= 80 && kind < 83) e = -70;                        // off the tensor-core path (small)
        else if (kind >= 83 && kind < 86) e = 50;                         // off the tensor-core path (large)
        else if (kind >= 86 && kind < 88) e = -128;                       // subnormal values
        const float mult = std::ldexp(1.0f, e);
        for (int i = 0; i < 32; ++i) x[i] = cpu::round_bf16(nd(g) * mult);
        if (kind >= 88 && kind < 91 && j == static_cast<int64_t>(h % G)) continue;  // raw bf16: the fp32 path
        if ((kind >= 91 && kind < 96 && j == 0) || (kind >= 96 && kind < 98)) {  // zero group / zero head
          std::fill(x, x + 32, 0.0f);
          continue;
        }
        gpu_testing::qdq_fp4_ue8m0_32(x);
      }
    }
  return q;
}

template <class T>
T* upload(const std::vector<T>& v) {
  T* d = nullptr;
  if (cudaMalloc(&d, std::max<size_t>(1, v.size()) * sizeof(T)) != cudaSuccess) return nullptr;
  if (!v.empty() && cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess) return nullptr;
  return d;
}

// The oracle's formula for one (row, t).
float oracle_score(const float* q, const float* wt, float wscale, const float* kf, int64_t IH, int64_t ihd) {
  float s = 0;
  for (int64_t h = 0; h < IH; ++h) {
    float v = cpu::round_bf16(cpu::dot<float>(q + h * ihd, kf, ihd));
    v = std::max(v, 0.0f);
    s += cpu::round_bf16(v * cpu::round_bf16(wt[h] * wscale));
  }
  return cpu::round_bf16(s);
}

void run_case(const Case& c, unsigned seed) {
  SCOPED_TRACE(testing::Message() << "rows " << c.rows << " ctx " << c.ctx << " ratio " << c.ratio << " IH " << c.IH
                                  << " ihd " << c.ihd << " pieces " << c.pieces << " special " << c.special);
  std::mt19937 g(seed);
  const int64_t G = c.ihd / 32, rb = c.ihd / 2 + G;
  const int64_t n = c.ctx / c.ratio;  // every piece's compressed rows (the last row's L_c)
  std::vector<std::vector<uint8_t>> keys;
  std::vector<gpu_testing::PagedRowsDev> dkeys;  // in pages of 8, 16, .. 128 rows by piece (tiles of 128 keys)
  std::vector<PieceDev> pcs(c.pieces);
  for (int p = 0; p < c.pieces; ++p) {
    keys.push_back(make_keys(n, c.ihd, g));
    dkeys.push_back(gpu_testing::paged_rows(keys.back(), rb, 3 + p % 5));
    ASSERT_TRUE(dkeys.back().rows.present());
    pcs[p].start = c.ctx - c.rows;
    pcs[p].T = c.rows;
    pcs[p].ikeys = dkeys.back().rows;
  }
  const std::vector<float> q = make_queries(c.rows, c.IH, c.ihd, g);
  std::vector<float> wt(c.rows * c.IH);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (auto& v : wt) v = cpu::round_bf16(nd(g));
  std::vector<bool> finite_row(c.rows, true);
  if (c.special)
    for (int64_t r = 1; r < c.rows; r += 7) {
      wt[r * c.IH + static_cast<int64_t>(g() % c.IH)] =
          (r % 2) ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
      finite_row[r] = false;
    }
  // Rows of piece p in call order get consecutive positions of that piece's chunk: the last rows of
  // the call see the most keys whatever the interleaving.
  std::vector<int64_t> pos(c.rows);
  std::vector<int32_t> rp(c.rows);
  for (int64_t r = 0; r < c.rows; ++r) {
    rp[r] = static_cast<int32_t>(r % c.pieces);
    pos[r] = c.ctx - c.rows + r;
  }
  const float wscale = 0.125f;
  float* dq = upload(q);
  float* dwt = upload(wt);
  int64_t* dpos = upload(pos);
  int32_t* drp = upload(rp);
  PieceDev* dpc = upload(pcs);
  const int64_t stride = n + 3;  // a few columns past every L_c
  const std::vector<float> init(c.rows * stride, std::numeric_limits<float>::quiet_NaN());
  float* dsc_a = upload(init);
  float* dsc_b = upload(init);
  float* dsc_c = upload(init);
  ASSERT_TRUE(dq && dwt && dpos && drp && dpc && dsc_a && dsc_b && dsc_c);
  const IndexScoresImpl impl0 = index_scores_impl();
  set_index_scores_impl(IndexScoresImpl::dp4a);
  CUDA_OK(index_scores(dq, dwt, wscale, dpc, drp, dpos, c.rows, c.IH, c.ihd, c.ratio, dsc_a, stride, n, nullptr));
  set_index_scores_impl(IndexScoresImpl::tensor_core);
  CUDA_OK(index_scores(dq, dwt, wscale, dpc, drp, dpos, c.rows, c.IH, c.ihd, c.ratio, dsc_b, stride, n, nullptr));
  set_index_scores_impl(IndexScoresImpl::automatic);
  CUDA_OK(index_scores(dq, dwt, wscale, dpc, drp, dpos, c.rows, c.IH, c.ihd, c.ratio, dsc_c, stride, n, nullptr));
  set_index_scores_impl(impl0);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> a(init.size()), b(init.size()), au(init.size());
  CUDA_OK(cudaMemcpy(a.data(), dsc_a, 4 * a.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(b.data(), dsc_b, 4 * b.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(au.data(), dsc_c, 4 * au.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(std::memcmp(a.data(), au.data(), 4 * a.size()), 0) << "automatic choice != dp4a";
  if (std::memcmp(a.data(), b.data(), 4 * a.size()) != 0) {
    int64_t diff = 0;
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t t = 0; t < stride; ++t)
        if (bits_of(a[r * stride + t]) != bits_of(b[r * stride + t]) && ++diff <= 5)
          ADD_FAILURE() << "row " << r << " t " << t << " (L_c " << (pos[r] + 1) / c.ratio << "): tensor cores "
                        << b[r * stride + t] << " dp4a " << a[r * stride + t];
    ADD_FAILURE() << diff << " scores differ";
  }
  // Nothing written past L_c.
  int64_t past = 0;
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t t = (pos[r] + 1) / c.ratio; t < stride; ++t) past += bits_of(a[r * stride + t]) != bits_of(init[0]);
  EXPECT_EQ(past, 0) << "scores written past L_c";
  // The oracle on up to 6 rows (first, last, some between) with finite weights.
  std::vector<std::vector<float>> kf(c.pieces, std::vector<float>(n * c.ihd));
  for (int p = 0; p < c.pieces; ++p)
    for (int64_t t = 0; t < n; ++t) {
      const uint8_t* row = &keys[p][t * rb];
      for (int64_t i = 0; i < c.ihd; ++i)
        kf[p][t * c.ihd + i] = e2m1_to_f32((row[i >> 1] >> (4 * (i & 1))) & 15) * ue8m0_to_f32(row[c.ihd / 2 + i / 32]);
    }
  int64_t mismatches = 0;
  for (int64_t k = 0; k < 6; ++k) {
    const int64_t r = k == 5 ? c.rows - 1 : k * c.rows / 5;
    if (r >= c.rows || !finite_row[r]) continue;
    const int64_t lc = (pos[r] + 1) / c.ratio;
    for (int64_t t = 0; t < lc; ++t) {
      const float want = oracle_score(&q[r * c.IH * c.ihd], &wt[r * c.IH], wscale, &kf[rp[r]][t * c.ihd], c.IH, c.ihd);
      if (bits_of(b[r * stride + t]) != bits_of(want) && ++mismatches <= 5)
        ADD_FAILURE() << "row " << r << " t " << t << ": " << b[r * stride + t] << " want " << want;
    }
  }
  EXPECT_EQ(mismatches, 0) << "against the oracle's formula";
  for (void* p : {static_cast<void*>(dq), static_cast<void*>(dwt), static_cast<void*>(dpos), static_cast<void*>(drp),
                  static_cast<void*>(dpc), static_cast<void*>(dsc_a), static_cast<void*>(dsc_b), static_cast<void*>(dsc_c)})
    cudaFree(p);
}

TEST(IndexScoresCuda, TensorCoresEqualDp4aAndOracle) {
  const Case cases[] = {
      {1, 300, 1, 32, 128, 1, false},    {3, 129, 1, 32, 128, 1, false},   {8, 128, 1, 32, 128, 1, false},
      {9, 1000, 2, 32, 128, 1, false},   {17, 4100, 1, 32, 128, 1, true}, {64, 2048, 2, 32, 128, 1, false},
      {200, 3000, 1, 32, 128, 1, true},  {333, 1500, 2, 32, 128, 1, false}, {130, 700, 1, 32, 128, 3, false},
      {40, 2600, 2, 32, 128, 2, true},   {257, 4096, 1, 32, 128, 1, false}, {100, 900, 1, 64, 128, 1, false},
      {24, 1300, 2, 64, 128, 2, true},   {50, 600, 1, 32, 64, 1, false},   {33, 777, 2, 32, 32, 1, false},
      {70, 500, 1, 64, 64, 3, false},    {12, 260, 1, 64, 32, 1, true},    {1, 1, 1, 32, 128, 1, false},
      {3, 5, 2, 32, 128, 1, false},      {32, 3000, 1, 32, 128, 32, false}, {48, 1200, 2, 32, 128, 5, true},
      {20, 700, 1, 64, 128, 20, false},
  };
  unsigned seed = 7;
  for (const Case& c : cases) run_case(c, seed++);
}

// Both kernels and the automatic choice at every row count from 1 to 40 on one piece (the dp4a
// kernel's split between one and four threads per key and the automatic switch included).
TEST(IndexScoresCuda, EveryRowCountUpTo40) {
  for (int64_t rows = 1; rows <= 40; ++rows) run_case({rows, 520, 1, 32, 128, 1, false}, 100 + static_cast<unsigned>(rows));
}

}  // namespace
}  // namespace dsv4::cuda
