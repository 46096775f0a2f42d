// Index scores at V4.1 shapes (32 index heads x 128, ratio 1): a prefill chunk of R rows ending at
// L_c compressed rows (row r at position L_c - R + r, so it sees L_c - R + r + 1 rows), timed with
// the dp4a kernel and the tensor-core kernel (same inputs, same bits: checked on three rows), as
// GPU time per call (CUDA graph), and as TOPS of the dots (2 * sum_r L_c(r) * 32 * 128 operations)
// against the device's dense int8 tensor-core rate (SMs x clock x 8192 operations per SM and clock
// on sm_90, 4096 on sm_80). Then, at L_c 32,768, a few-row sweep for the automatic choice between
// the kernels and decode batches (one row per sequence). Usage: index_scores_bench [--quick]
// [--wide-scales] (--quick: 2,048 rows and L_c 32,768 only; --wide-scales: key group scales spread
// over 10 binades instead of 4, so that many (head, key) pairs leave the tensor-core kernel's
// integer path).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "backends/cuda/kernels/attention/attention_kernels.cuh"
#include "bench_device.h"
#include "core/fp4.h"
#include "core/quant.h"
#include "core/ue8m0.h"
#include "graph_timing.h"

using namespace dsv4;
using namespace dsv4::cuda;

int main(int argc, char** argv) {
  const cudaDeviceProp prop = bench::bench_device();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  bool quick = false, wide = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--quick") quick = true;
    else if (std::string(argv[i]) == "--wide-scales") wide = true;
  }
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  const double peak = static_cast<double>(prop.multiProcessorCount) * khz * 1e3 * (prop.major >= 9 ? 8192 : 4096);
  std::printf("device %s, %d SMs at %.0f MHz: dense int8 tensor-core rate %.0f TOPS\n", prop.name,
              prop.multiProcessorCount, khz / 1e3, peak / 1e12);

  const int64_t IH = 32, ihd = 128, G = ihd / 32, rb = ihd / 2 + G;
  const std::vector<int64_t> lcs = quick ? std::vector<int64_t>{32768} : std::vector<int64_t>{32768, 131072};
  const std::vector<int64_t> rows_list = quick ? std::vector<int64_t>{2048} : std::vector<int64_t>{2048, 8192};
  const int64_t max_rows = *std::max_element(rows_list.begin(), rows_list.end());
  const int64_t max_lc = *std::max_element(lcs.begin(), lcs.end());

  // Keys: random codes, group scales 2^(b-127) with b in 118..121 (or 116..125 with --wide-scales).
  std::mt19937 g(1);
  std::vector<uint8_t> keys(max_lc * rb);
  for (int64_t t = 0; t < max_lc; ++t) {
    for (int64_t i = 0; i < ihd / 2; ++i) keys[t * rb + i] = static_cast<uint8_t>(g());
    for (int64_t j = 0; j < G; ++j) keys[t * rb + ihd / 2 + j] = static_cast<uint8_t>(wide ? 116 + g() % 10 : 118 + g() % 4);
  }
  // Queries FP4/UE8M0-32 QDQ'd (as the layer's are), one magnitude per head; bf16 weights.
  std::vector<float> q(max_rows * IH * ihd), wt(max_rows * IH);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t rh = 0; rh < max_rows * IH; ++rh) {
    const float mult = std::ldexp(1.0f, static_cast<int>(g() % 5) - 2);
    for (int64_t j = 0; j < G; ++j) {
      float* x = &q[rh * ihd + 32 * j];
      float amax = 0;
      for (int i = 0; i < 32; ++i) {
        x[i] = round_bf16(nd(g) * mult);
        amax = std::max(amax, std::fabs(x[i]));
      }
      const float sv = ue8m0_to_f32(fp4_ue8m0_scale(amax));
      for (int i = 0; i < 32; ++i) x[i] = e2m1_to_f32(fp4_ue8m0_code(x[i], 1.0f / sv)) * sv;
    }
  }
  for (auto& v : wt) v = round_bf16(nd(g));

  uint8_t* dkeys = nullptr;
  float *dq = nullptr, *dwt = nullptr, *dsc = nullptr;
  int64_t* dpos = nullptr;
  int32_t* drp = nullptr;
  PieceDev* dpc = nullptr;
  CHECK_CUDA(cudaMalloc(&dkeys, keys.size()));
  CHECK_CUDA(cudaMalloc(&dq, 4 * q.size()));
  CHECK_CUDA(cudaMalloc(&dwt, 4 * wt.size()));
  CHECK_CUDA(cudaMalloc(&dsc, 4 * static_cast<size_t>(max_rows) * max_lc));
  CHECK_CUDA(cudaMalloc(&dpos, 8 * max_rows));
  CHECK_CUDA(cudaMalloc(&drp, 4 * max_rows));
  CHECK_CUDA(cudaMalloc(&dpc, 256 * sizeof(PieceDev)));
  CHECK_CUDA(cudaMemcpy(dkeys, keys.data(), keys.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dq, q.data(), 4 * q.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dwt, wt.data(), 4 * wt.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemset(drp, 0, 4 * max_rows));
  std::vector<PieceDev> pcs(256);  // piece 0 for the chunks; pieces 0..R-1 (the same keys) for a decode batch
  // The keys as the KV pool holds a ratio-1 table: pages of 256 rows (family::kDefaultPagePositions), here adjacent.
  constexpr int32_t kShift = 8;
  std::vector<uint8_t*> pages;
  for (int64_t t = 0; t < max_lc; t += int64_t{1} << kShift) pages.push_back(dkeys + t * rb);
  uint8_t** dpages = nullptr;
  CHECK_CUDA(cudaMalloc(&dpages, sizeof(uint8_t*) * pages.size()));
  CHECK_CUDA(cudaMemcpy(dpages, pages.data(), sizeof(uint8_t*) * pages.size(), cudaMemcpyHostToDevice));
  for (auto& pc : pcs) pc.ikeys = RowPages{dpages, 0, kShift};
  CHECK_CUDA(cudaMemcpy(dpc, pcs.data(), sizeof(PieceDev) * pcs.size(), cudaMemcpyHostToDevice));
  const float wscale = 1.0f / 64;

  // Times both kernels on R rows ending at L_c (batch: R rows of R sequences, each at L_c); prints one line.
  auto run = [&](int64_t R, int64_t lc, int replays, bool batch) {
    std::vector<int64_t> pos(R);
    std::vector<int32_t> rp(R, 0);
    double work = 0;
    for (int64_t r = 0; r < R; ++r) {
      pos[r] = batch ? lc - 1 : lc - R + r;
      if (batch) rp[r] = static_cast<int32_t>(r);
      work += 2.0 * static_cast<double>(pos[r] + 1) * IH * ihd;
    }
    CHECK_CUDA(cudaMemcpy(dpos, pos.data(), 8 * R, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(drp, rp.data(), 4 * R, cudaMemcpyHostToDevice));
    double us[2];
    std::vector<float> rows_seen[2];
    const IndexScoresImpl impls[2] = {IndexScoresImpl::dp4a, IndexScoresImpl::tensor_core};
    for (int k = 0; k < 2; ++k) {
      set_index_scores_impl(impls[k]);
      CHECK_CUDA(cudaMemset(dsc, 0, 4 * static_cast<size_t>(R) * lc));
      us[k] = bench::graph_median_us(
          [&](int, cudaStream_t s) {
            bench::check_cuda(index_scores(dq, dwt, wscale, dpc, drp, dpos, R, IH, ihd, 1, dsc, lc, lc, s), "index_scores");
          },
          1, replays);
      for (int64_t r : {int64_t{0}, R / 2, R - 1}) {
        std::vector<float> h(lc);
        CHECK_CUDA(cudaMemcpy(h.data(), dsc + r * lc, 4 * lc, cudaMemcpyDeviceToHost));
        rows_seen[k].insert(rows_seen[k].end(), h.begin(), h.end());
      }
    }
    set_index_scores_impl(IndexScoresImpl::automatic);
    const bool same = std::memcmp(rows_seen[0].data(), rows_seen[1].data(), 4 * rows_seen[0].size()) == 0;
    std::printf("%5ld rows%s, L_c %6ld: dp4a %9.3f ms (%6.1f TOPS); tensor cores %9.3f ms (%6.1f TOPS, %4.1f%% of the int8 "
                "rate); %.2fx; rows 0, R/2, R-1 %s\n",
                long(R), batch ? " (one per sequence)" : "", long(lc), us[0] / 1e3, work / us[0] / 1e6, us[1] / 1e3, work / us[1] / 1e6,
                100.0 * work / (us[1] * 1e-6) / peak, us[0] / us[1], same ? "same bits" : "DIFFER");
  };
  std::printf("prefill chunks (%s key scales):\n", wide ? "wide" : "narrow");
  for (int64_t lc : lcs)
    for (int64_t R : rows_list) run(R, lc, 3, false);
  std::printf("few rows at L_c 32768 (the automatic choice takes tensor cores from 8 rows):\n");
  for (int64_t R : {1, 2, 4, 8, 16, 32, 64, 256}) run(R, 32768, 10, false);
  std::printf("decode batches at L_c 32768, every row its own sequence:\n");
  for (int64_t R : {8, 32, 128}) run(R, 32768, 10, true);
  return 0;
}
