// The CUDA-core sparse attention (DSV4_ATTN_TC=0; the default tensor-core kernel is held to a
// tolerance by attention_tc_cuda_test) at the V4.1 head shape (d 512, window 128, top-512) against
// the CPU oracle bit for bit, in one launch over many rows (the fused cluster kernel) and row by row
// (two-pass): those kernels repeat the oracle's fp32 operations in its order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attention_testing.h"
#include "op_testing.h"
#include "paged_rows_testing.h"
#include "backends/cpu/attention.h"
#include "backends/cpu/kv_rows.h"
#include "backends/cpu/rope.h"
#include "backends/cuda/runtime/arena.h"
#include "backends/cuda/kernels/attention/attention_kernels.cuh"

namespace dsv4::cuda {
namespace {

using gpu_testing::bits_of;

// Sparse attention at the V4.1 head shape (d 512, window 128, top-512: ten 64-entry blocks, so
// the multi-block online softmax runs) against the oracle's
// cpu::sparse_attend_head<float> + inverse RoPE, bit for bit: window entries from this call's keys
// and from the FP8 ring, positions below the window width (empty window entries), selections
// ending early in -1 (empty blocks skipped), both compressed formats. Every row is also run alone
// (a one-row launch) and must give the same bits (batch invariance): the 160-row launch runs the
// fused cluster kernel, the one-row launches the two-pass kernels.
TEST(AttentionCuda, SparseAttentionEqualsOracleAtV41HeadShape) {
  // The CUDA-core implementation whatever the environment asks for (restored at the end).
  const gpu_testing::ScopedSparseAttention impl(SparseAttentionImpl::cuda_core);
  const int64_t H = 8, d = 512, rd = 64, nf = rd / 2, W = 128, K = 512, G = 2, cap = W + 16, nc = 700;
  const int64_t wrow = d + d / 32;
  // Two pieces: 20 rows from position 0 (fresh keys only, short windows), 140 rows from 1000.
  const int64_t starts[2] = {0, 1000}, Ts[2] = {20, 140}, rows = 160;
  std::mt19937 g(21);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto bf = [&](float s) { return cpu::round_bf16(nd(g) * s); };
  std::vector<float> q(rows * H * d), kvn(rows * d), sink(H);
  for (auto& v : q) v = bf(1.0f);
  for (auto& v : kvn) v = bf(1.0f);
  for (auto& v : sink) v = bf(1.0f);
  // Ring rows: slot (pos % cap) for positions 1000 - W .. 999, FP8-packed random keys.
  std::vector<uint8_t> ring(cap * wrow);
  std::vector<float> tmp(d);
  for (int64_t s = 0; s < cap; ++s) {
    for (auto& v : tmp) v = bf(1.0f);
    cpu::pack_row(KvRowFormat::fp8_ue8m0_32, tmp.data(), d, &ring[s * wrow]);
  }
  const auto freqs = cpu::rope_frequencies({static_cast<int>(rd), 10000.0, 0, 16.0, 32.0, 1.0});
  // Selections: row r has a count of valid rows (K, 0, or in between), ascending distinct, -1 after.
  std::vector<int32_t> top(rows * K, -1);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t nv = r % 5 == 0 ? K : r % 5 == 1 ? 0 : static_cast<int64_t>(g() % K);
    std::vector<int32_t> all(nc);
    for (int64_t i = 0; i < nc; ++i) all[i] = static_cast<int32_t>(i);
    std::shuffle(all.begin(), all.end(), g);
    std::sort(all.begin(), all.begin() + nv);
    std::copy(all.begin(), all.begin() + nv, top.begin() + r * K);
  }
  std::vector<int64_t> pos(rows);
  std::vector<int32_t> rp(rows);
  std::vector<PieceDev> pcs(2);
  for (int pi = 0, r = 0; pi < 2; ++pi) {
    for (int64_t i = 0; i < Ts[pi]; ++i, ++r) { pos[r] = starts[pi] + i; rp[r] = pi; }
  }
  for (KvRowFormat fmt : {KvRowFormat::fp8_ue8m0_32, KvRowFormat::fp4_e4m3_16}) {
    SCOPED_TRACE(static_cast<int>(fmt));
    const int64_t crow = kv_row_bytes(fmt, d);
    std::vector<uint8_t> comp(nc * crow);
    for (int64_t t = 0; t < nc; ++t) {
      for (auto& v : tmp) v = bf(1.0f);
      cpu::pack_row(fmt, tmp.data(), d, &comp[t * crow]);
    }
    Arena a(size_t{64} << 20);
    auto up = [&](const void* h, size_t n) { void* p = a.alloc(n + 16); cudaMemcpy(p, h, n, cudaMemcpyHostToDevice); return p; };
    uint8_t* dring = static_cast<uint8_t*>(up(ring.data(), ring.size()));
    const gpu_testing::PagedRowsDev dcomp = gpu_testing::paged_rows(comp, crow);  // pages of 8 rows
    for (int pi = 0, r0 = 0; pi < 2; r0 += static_cast<int>(Ts[pi]), ++pi) {
      pcs[pi].start = starts[pi]; pcs[pi].T = Ts[pi]; pcs[pi].row0 = r0;
      pcs[pi].window = dring; pcs[pi].comp = dcomp.rows;
    }
    auto* dq = static_cast<float*>(up(q.data(), 4 * q.size()));
    auto* dk = static_cast<float*>(up(kvn.data(), 4 * kvn.size()));
    auto* dsink = static_cast<float*>(up(sink.data(), 4 * sink.size()));
    auto* df = static_cast<float*>(up(freqs.data(), 4 * freqs.size()));
    auto* dtop = static_cast<int32_t*>(up(top.data(), 4 * top.size()));
    auto* dpos = static_cast<int64_t*>(up(pos.data(), 8 * rows));
    auto* drp = static_cast<int32_t*>(up(rp.data(), 4 * rows));
    auto* dpc = static_cast<PieceDev*>(up(pcs.data(), sizeof(PieceDev) * 2));
    float* dout = a.alloc_n<float>(rows * H * d);
    float* dout1 = a.alloc_n<float>(H * d);
    float* dwork1 = a.alloc_n<float>(std::max<int64_t>(1, sparse_attention_work_floats(1, H, W, K)));
    const CompFormat cf = fmt == KvRowFormat::fp8_ue8m0_32 ? CompFormat::fp8_ue8m0_32 : CompFormat::fp4_e4m3_16;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    float* dwork = a.alloc_n<float>(std::max<int64_t>(1, sparse_attention_work_floats(rows, H, W, K)));
    CUDA_OK(sparse_attention(dq, dk, dpc, drp, dpos, rows, H, d, W, cap, dtop, K, cf, dsink, scale, df,
                             static_cast<int>(nf), G, dout, dwork, nullptr));
    std::vector<float> got(rows * H * d), got1(H * d);
    CUDA_OK(cudaMemcpy(got.data(), dout, 4 * got.size(), cudaMemcpyDeviceToHost));
    std::vector<float> ringf(cap * d), compf(nc * d), o(d);
    for (int64_t s = 0; s < cap; ++s) cpu::unpack_row(KvRowFormat::fp8_ue8m0_32, &ring[s * wrow], d, &ringf[s * d]);
    for (int64_t t = 0; t < nc; ++t) cpu::unpack_row(fmt, &comp[t * crow], d, &compf[t * d]);
    const int64_t hpg = H / G;
    int64_t mismatches = 0, alone_diff = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const PieceDev& pc = pcs[rp[r]];
      const int64_t p = pos[r], first = std::max<int64_t>(0, p - W + 1);
      std::vector<const float*> keys(W, nullptr);
      for (int64_t qp = first; qp <= p; ++qp)
        keys[qp - first] = qp >= pc.start ? &kvn[(pc.row0 + qp - pc.start) * d] : &ringf[(qp % cap) * d];
      for (int64_t i = 0; i < K; ++i) {
        const int32_t t = top[r * K + i];
        keys.push_back(t >= 0 ? &compf[static_cast<int64_t>(t) * d] : nullptr);
      }
      CUDA_OK(sparse_attention(dq + r * H * d, dk, dpc, drp + r, dpos + r, 1, H, d, W, cap, dtop + r * K, K, cf,
                               dsink, scale, df, static_cast<int>(nf), G, dout1, dwork1, nullptr));
      CUDA_OK(cudaMemcpy(got1.data(), dout1, 4 * got1.size(), cudaMemcpyDeviceToHost));
      for (int64_t h = 0; h < H; ++h) {
        cpu::sparse_attend_head<float>(&q[(r * H + h) * d], keys, d, scale, sink[h], o.data());
        cpu::rope_apply<float>(&o[d - rd], freqs, p, true);
        const float* gr = &got[((h / hpg) * rows + r) * hpg * d + (h % hpg) * d];
        const float* g1 = &got1[(h / hpg) * hpg * d + (h % hpg) * d];
        for (int64_t i = 0; i < d; ++i) {
          if (bits_of(gr[i]) != bits_of(o[i]) && ++mismatches <= 5)
            ADD_FAILURE() << "row " << r << " head " << h << " channel " << i << ": " << gr[i] << " want " << o[i];
          alone_diff += bits_of(g1[i]) != bits_of(gr[i]);
        }
      }
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_EQ(alone_diff, 0) << "a row alone differs from the same row in the 160-row launch";
  }
}

}  // namespace
}  // namespace dsv4::cuda
