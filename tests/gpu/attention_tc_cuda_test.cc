// The tensor-core sparse attention (sparse_attention's default implementation) against the CPU
// oracle (cpu::sparse_attend_head + inverse RoPE of the tail) to a tolerance, and its batch
// invariance by byte comparison, at the V4.1 head shape (64 heads of 512, window 128, top-512) and
// the small / tiny preset shapes.
//
// Tolerance: q.k (512 terms) and P.V (64 terms per block) are summed by the MMA in its own order
// with fp32 accumulation instead of the oracle's 8 interleaved sequential partial sums. That moves a
// logit by about 1e-6 relative, which flips the bf16 rounding of a P or of an output element in a
// small fraction of the elements: an NRMS of about 2^-9 at most is expected, 2^-7 is the bound (a
// real defect - a wrong key, block, scale or rotation - shows as an NRMS near 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

struct Shape {
  const char* name;
  int64_t H, d, rd, W, K, G;
};

// V4.1 (full), and the small / tiny presets' attention shapes (family/deepseek_v41/preset.cc).
const Shape kShapes[] = {
    {"v41", 64, 512, 64, 128, 512, 8},
    {"small", 8, 512, 64, 128, 64, 4},
    {"tiny", 4, 128, 64, 16, 8, 2},
};

// bf16 values (floats with zero low halves) as a monotonic integer, for distances in bf16 ulps.
int64_t bf16_ord(float v) {
  const uint32_t b = gpu_testing::bits_of(v) >> 16;
  return (b & 0x8000u) ? -static_cast<int64_t>(b & 0x7fffu) : static_cast<int64_t>(b);
}

// One launch's inputs on the host and the device: rows of two pieces (positions 0.. with only this
// call's keys and short windows; positions 1000.. with the FP8 ring before), the compressed rows
// (rows near the window's positions hold the same values as the window keys there: window and
// compressed entries overlap), every row's selection list.
struct Case {
  Shape sh;
  int64_t W, K, rows, cap, nc = 1200;
  KvRowFormat fmt;
  std::vector<float> q, kvn, sink, freqs, ringf, compf;
  std::vector<uint8_t> ring, comp;
  std::vector<int32_t> top, rp;
  std::vector<int64_t> pos;
  std::vector<PieceDev> pcs;
  int64_t starts[2] = {0, 1000}, Ts[2] = {0, 0};
  Arena arena{size_t{256} << 20};
  float *dq = nullptr, *dk = nullptr, *dsink = nullptr, *df = nullptr, *dout = nullptr, *dwork = nullptr;
  int32_t *dtop = nullptr, *drp = nullptr;
  int64_t* dpos = nullptr;
  PieceDev* dpc = nullptr;
  gpu_testing::PagedRowsDev dcomp;  // the compressed rows in pages of 8 rows

  // counts(r): the number of valid selected rows of row r (-1 after them); W = 0: compressed only.
  template <typename Counts>
  Case(const Shape& s, int64_t W_, int64_t K_, int64_t T0, int64_t T1, KvRowFormat f, uint32_t seed, Counts counts)
      : sh(s), W(W_), K(K_), rows(T0 + T1), cap(std::max<int64_t>(W_, 1) + 16), fmt(f) {
    Ts[0] = T0;
    Ts[1] = T1;
    const int64_t H = s.H, d = s.d, wrow = d + d / 32, crow = kv_row_bytes(fmt, d);
    std::mt19937 g(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto bf = [&](float sc) { return cpu::round_bf16(nd(g) * sc); };
    q.resize(rows * H * d);
    kvn.resize(rows * d);
    sink.resize(H);
    for (auto& v : q) v = bf(1.0f);
    for (auto& v : kvn) v = bf(1.0f);
    for (auto& v : sink) v = bf(1.0f);
    std::vector<float> tmp(d);
    // Window keys per position (the ring's rows before 1000, the fresh rows after).
    ring.resize(cap * wrow);
    ringf.resize(cap * d);
    std::vector<float> win(2000 * d);
    for (auto& v : win) v = bf(1.0f);
    for (int64_t qp = 1000 - cap; qp < 1000; ++qp) {
      const int64_t sl = qp % cap;
      cpu::pack_row(KvRowFormat::fp8_ue8m0_32, &win[qp * d], d, &ring[sl * wrow]);
      cpu::unpack_row(KvRowFormat::fp8_ue8m0_32, &ring[sl * wrow], d, &ringf[sl * d]);
    }
    for (int pi = 0, r = 0; pi < 2; ++pi)
      for (int64_t i = 0; i < Ts[pi]; ++i, ++r) std::copy_n(&win[(starts[pi] + i) * d], d, &kvn[r * d]);
    comp.resize(nc * crow);
    compf.resize(nc * d);
    for (int64_t t = 0; t < nc; ++t) {
      for (auto& v : tmp) v = bf(1.0f);
      const float* src = t >= 1000 - W && t < 2000 ? &win[t * d] : tmp.data();
      cpu::pack_row(fmt, src, d, &comp[t * crow]);
      cpu::unpack_row(fmt, &comp[t * crow], d, &compf[t * d]);
    }
    freqs = cpu::rope_frequencies({static_cast<int>(s.rd), 10000.0, 0, 16.0, 32.0, 1.0});
    top.assign(std::max<int64_t>(1, rows * K), -1);
    pos.resize(rows);
    rp.resize(rows);
    pcs.resize(2);
    for (int pi = 0, r = 0; pi < 2; ++pi)
      for (int64_t i = 0; i < Ts[pi]; ++i, ++r) { pos[r] = starts[pi] + i; rp[r] = pi; }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t nv = std::min<int64_t>(K, counts(r, g));
      // Half of them (rows of the second piece) among the rows at the window's positions.
      std::vector<int32_t> all;
      for (int64_t t = 0; t < nc; ++t) all.push_back(static_cast<int32_t>(t));
      std::shuffle(all.begin(), all.end(), g);
      if (rp[r] == 1) {
        std::vector<int32_t> near;
        for (int64_t t = std::max<int64_t>(0, pos[r] - W + 1); t <= pos[r] && t < nc; ++t) near.push_back(static_cast<int32_t>(t));
        std::shuffle(near.begin(), near.end(), g);
        near.resize(std::min<size_t>(near.size(), static_cast<size_t>(nv / 2)));
        std::vector<int32_t> rest;
        for (int32_t t : all)
          if (std::find(near.begin(), near.end(), t) == near.end()) rest.push_back(t);
        near.insert(near.end(), rest.begin(), rest.end());
        all = near;
      }
      std::sort(all.begin(), all.begin() + nv);
      std::copy(all.begin(), all.begin() + nv, top.begin() + r * K);
    }
    auto up = [&](const void* h, size_t n) {
      void* p = arena.alloc(n + 16);
      EXPECT_EQ(cudaMemcpy(p, h, n, cudaMemcpyHostToDevice), cudaSuccess);
      return p;
    };
    uint8_t* dring = static_cast<uint8_t*>(up(ring.data(), ring.size()));
    dcomp = gpu_testing::paged_rows(comp, crow);
    for (int pi = 0, r0 = 0; pi < 2; r0 += static_cast<int>(Ts[pi]), ++pi) {
      pcs[pi].start = starts[pi];
      pcs[pi].T = Ts[pi];
      pcs[pi].row0 = r0;
      pcs[pi].window = dring;
      pcs[pi].comp = dcomp.rows;
    }
    dq = static_cast<float*>(up(q.data(), 4 * q.size()));
    dk = static_cast<float*>(up(kvn.data(), 4 * kvn.size()));
    dsink = static_cast<float*>(up(sink.data(), 4 * sink.size()));
    df = static_cast<float*>(up(freqs.data(), 4 * freqs.size()));
    dtop = static_cast<int32_t*>(up(top.data(), 4 * top.size()));
    dpos = static_cast<int64_t*>(up(pos.data(), 8 * rows));
    drp = static_cast<int32_t*>(up(rp.data(), 4 * rows));
    dpc = static_cast<PieceDev*>(up(pcs.data(), sizeof(PieceDev) * 2));
    dout = arena.alloc_n<float>(rows * H * d);
    dwork = arena.alloc_n<float>(std::max<int64_t>(1, sparse_attention_work_floats(rows, H, W, K)));
  }

  float scale() const { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.d))); }
  CompFormat cfmt() const { return fmt == KvRowFormat::fp8_ue8m0_32 ? CompFormat::fp8_ue8m0_32 : CompFormat::fp4_e4m3_16; }

  // Rows [r0, r0 + n) in one launch; out: [G][n][H/G * d] as the kernel writes it.
  cudaError_t launch(int64_t r0, int64_t n, float* out) const {
    const int64_t H = sh.H, d = sh.d;
    return sparse_attention(dq + r0 * H * d, dk, dpc, drp + r0, dpos + r0, n, H, d, W, cap, dtop + r0 * K, K, cfmt(),
                            dsink, scale(), df, static_cast<int>(sh.rd / 2), sh.G, out, dwork, nullptr);
  }

  // The oracle (Acc) for row r, head h: o [d].
  template <typename Acc>
  void oracle(int64_t r, int64_t h, float* o) const {
    const int64_t d = sh.d, p = pos[r], first = std::max<int64_t>(0, p - W + 1);
    const PieceDev& pc = pcs[rp[r]];
    std::vector<const float*> keys(W, nullptr);
    for (int64_t qp = first; qp <= p && qp - first < W; ++qp)
      keys[qp - first] = qp >= pc.start ? &kvn[(pc.row0 + qp - pc.start) * d] : &ringf[(qp % cap) * d];
    for (int64_t i = 0; i < K; ++i) {
      const int32_t t = top[r * K + i];
      keys.push_back(t >= 0 ? &compf[static_cast<int64_t>(t) * d] : nullptr);
    }
    cpu::sparse_attend_head<Acc>(&q[(r * sh.H + h) * d], keys, d, static_cast<Acc>(scale()), sink[h], o);
    cpu::rope_apply<float>(&o[d - sh.rd], freqs, p, true);
  }

  // Row r, head h of a launch output of n rows starting at r0.
  const float* at(const std::vector<float>& out, int64_t r0, int64_t n, int64_t r, int64_t h) const {
    const int64_t hpg = sh.H / sh.G;
    return &out[((h / hpg) * n + (r - r0)) * hpg * sh.d + (h % hpg) * sh.d];
  }
};

// Every row of a case against the oracle: NRMS over o (and the ref32 floor against ref64 for
// scale), max distance in bf16 ulps; rows without a valid entry must be exactly zero.
void check_against_oracle(Case& c, const char* what) {
  SCOPED_TRACE(what);
  const int64_t H = c.sh.H, d = c.sh.d;
  std::vector<float> got(c.rows * H * d);
  CUDA_OK(c.launch(0, c.rows, c.dout));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(got.data(), c.dout, 4 * got.size(), cudaMemcpyDeviceToHost));
  double num = 0, den = 0, num32 = 0, den64 = 0, num_tc64 = 0;
  int64_t max_ulps = 0, diff_elems = 0, zero_rows = 0, nonzero_bad = 0;
  std::vector<float> o(d), o64(d);
  for (int64_t r = 0; r < c.rows; ++r) {
    bool any_valid = false;
    for (int64_t i = 0; i < c.K; ++i) any_valid |= c.top[r * c.K + i] >= 0;
    any_valid |= c.W > 0;
    zero_rows += !any_valid;
    for (int64_t h = 0; h < H; ++h) {
      c.oracle<float>(r, h, o.data());
      c.oracle<double>(r, h, o64.data());
      const float* g = c.at(got, 0, c.rows, r, h);
      for (int64_t i = 0; i < d; ++i) {
        const double e = double(g[i]) - o[i];
        num += e * e;
        den += double(o[i]) * o[i];
        num32 += (double(o[i]) - o64[i]) * (double(o[i]) - o64[i]);
        num_tc64 += (double(g[i]) - o64[i]) * (double(g[i]) - o64[i]);
        den64 += double(o64[i]) * o64[i];
        const int64_t u = std::llabs(bf16_ord(g[i]) - bf16_ord(o[i]));
        max_ulps = std::max(max_ulps, u);
        diff_elems += u != 0;
        if (!any_valid && g[i] != 0.0f && ++nonzero_bad <= 5)
          ADD_FAILURE() << "row " << r << " (no valid entry) head " << h << " channel " << i << ": " << g[i];
      }
    }
  }
  const double nrms = std::sqrt(num / std::max(den, 1e-300));
  std::printf("[%s %s W=%ld K=%ld %s, %ld rows, %ld without a valid entry] NRMS(tc, oracle32) %.3e (bound 2^-7 = %.3e)"
              "  NRMS(tc, oracle64) %.3e  NRMS(oracle32, oracle64) %.3e  max %ld bf16 ulps, %.4f%% of elements differ\n",
              c.sh.name, what, long(c.W), long(c.K), c.fmt == KvRowFormat::fp8_ue8m0_32 ? "fp8" : "fp4", long(c.rows),
              long(zero_rows), nrms, 1.0 / 128, std::sqrt(num_tc64 / std::max(den64, 1e-300)),
              std::sqrt(num32 / std::max(den64, 1e-300)), long(max_ulps),
              100.0 * double(diff_elems) / double(c.rows * H * d));
  if (den > 0) {
    EXPECT_LE(nrms, 1.0 / 128) << "tensor-core sparse attention too far from the oracle";
  } else {
    EXPECT_EQ(num, 0.0);
  }
  EXPECT_EQ(nonzero_bad, 0);
}

class TcAttention : public ::testing::Test {
 protected:
  gpu_testing::ScopedSparseAttention impl_{SparseAttentionImpl::tensor_core};
};

// Rows with every kind of list: full selections, none, a few, in between; window only (K = 0);
// compressed only (W = 0) with rows that select nothing (no valid entry: zeros); both formats.
TEST_F(TcAttention, MatchesOracleWithinTolerance) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.name);
    const int64_t T0 = 12, T1 = s.H >= 64 ? 28 : 60;  // the oracle's time on the host
    auto mixed = [&](int64_t r, std::mt19937& g) -> int64_t {
      switch (r % 5) {
        case 0: return s.K;
        case 1: return 0;
        case 2: return 1 + static_cast<int64_t>(g() % 3);
        default: return static_cast<int64_t>(g() % (s.K + 1));
      }
    };
    for (KvRowFormat fmt : {KvRowFormat::fp4_e4m3_16, KvRowFormat::fp8_ue8m0_32}) {
      Case c(s, s.W, s.K, T0, T1, fmt, 31, mixed);
      check_against_oracle(c, "window + selected");
    }
    {
      Case c(s, s.W, 0, T0, T1, KvRowFormat::fp4_e4m3_16, 32, [](int64_t, std::mt19937&) { return int64_t{0}; });
      check_against_oracle(c, "window only");
    }
    {
      auto sparse_counts = [&](int64_t r, std::mt19937& g) -> int64_t {
        return r % 3 == 0 ? 0 : r % 3 == 1 ? 1 + static_cast<int64_t>(g() % 4) : s.K;
      };
      Case c(s, 0, s.K, T0, T1, KvRowFormat::fp4_e4m3_16, 33, sparse_counts);
      check_against_oracle(c, "selected only");
    }
  }
}

// Batch invariance, byte for byte: a row alone, at position 0 and at position 237 of a 300-row
// launch (the same q, position, piece and list at both places) give the same bytes; every row of
// the 300-row launch equals the same row launched alone, and the rows of 20-row launches equal
// theirs in the 300-row launch. The three row counts take the kernel's three grids (attn_sparse_tc.cu:
// one row: CTAs of 16 heads and a quarter of the channels at d >= 256; 20 rows: 16 heads, every
// channel; 300 rows: 32 heads per CTA at 64 heads), which must agree bit for bit.
TEST_F(TcAttention, BatchInvariantByBytes) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(s.name);
    auto mixed = [&](int64_t r, std::mt19937& g) -> int64_t {
      return r % 4 == 0 ? s.K : r % 4 == 1 ? 0 : static_cast<int64_t>(g() % (s.K + 1));
    };
    Case c(s, s.W, s.K, 20, 280, KvRowFormat::fp4_e4m3_16, 41, mixed);
    const int64_t H = s.H, d = s.d, R = c.rows;
    // Row 237 := row 0 (q, position, piece, list); its window keys are those of row 0's piece.
    std::copy_n(&c.q[0], H * d, &c.q[237 * H * d]);
    c.pos[237] = c.pos[0];
    c.rp[237] = c.rp[0];
    std::copy_n(&c.top[0], c.K, &c.top[237 * c.K]);
    CUDA_OK(cudaMemcpy(c.dq + 237 * H * d, c.q.data(), 4 * H * d, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(c.dpos + 237, &c.pos[0], 8, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(c.drp + 237, &c.rp[0], 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(c.dtop + 237 * c.K, c.top.data(), 4 * c.K, cudaMemcpyHostToDevice));
    std::vector<float> all(R * H * d), one(H * d), part(20 * H * d);
    CUDA_OK(c.launch(0, R, c.dout));
    CUDA_OK(cudaMemcpy(all.data(), c.dout, 4 * all.size(), cudaMemcpyDeviceToHost));
    int64_t rows_differ = 0;
    for (int64_t r = 0; r < R; ++r) {
      CUDA_OK(c.launch(r, 1, c.dout));
      CUDA_OK(cudaMemcpy(one.data(), c.dout, 4 * one.size(), cudaMemcpyDeviceToHost));
      bool same = true;
      for (int64_t h = 0; h < H; ++h)
        same = same && std::memcmp(c.at(all, 0, R, r, h), c.at(one, r, 1, r, h), 4 * d) == 0;
      if (!same && ++rows_differ <= 5) ADD_FAILURE() << "row " << r << " alone differs from the 300-row launch";
      if (r == 0) {
        bool same237 = true;
        for (int64_t h = 0; h < H; ++h)
          same237 = same237 && std::memcmp(c.at(all, 0, R, 237, h), c.at(one, 0, 1, 0, h), 4 * d) == 0 &&
                    std::memcmp(c.at(all, 0, R, 237, h), c.at(all, 0, R, 0, h), 4 * d) == 0;
        EXPECT_TRUE(same237) << "the row at position 237 differs from itself at position 0 or alone";
      }
    }
    EXPECT_EQ(rows_differ, 0);
    for (int64_t r0 : {int64_t{0}, int64_t{130}, int64_t{237}}) {
      CUDA_OK(c.launch(r0, 20, c.dout));
      CUDA_OK(cudaMemcpy(part.data(), c.dout, 4 * part.size(), cudaMemcpyDeviceToHost));
      int64_t differ = 0;
      for (int64_t r = r0; r < r0 + 20; ++r)
        for (int64_t h = 0; h < H; ++h) differ += std::memcmp(c.at(all, 0, R, r, h), c.at(part, r0, 20, r, h), 4 * d) != 0;
      EXPECT_EQ(differ, 0) << "rows " << r0 << ".." << r0 + 19 << " as a 20-row launch differ from the 300-row launch";
    }
    std::printf("[%s] batch invariance: %ld rows, each alone and in launches of 20 and 300 rows: %s\n", s.name, long(R),
                rows_differ == 0 ? "same bytes" : "DIFFERENT");
  }
}

}  // namespace
}  // namespace dsv4::cuda
