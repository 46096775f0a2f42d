// tp_forward_test --scenario moe-bench: the routed experts of one MoE layer at full V4.1-Flash width (D 5120,
// 384 experts of I 2304, 6 active, FP4 weights from synth_fill, uniform hash routing shared by the ranks), split
// tp_intermediate (every expert's intermediate cut, the rank-ordered sum of [batch, D]) vs expert_parallel (whole
// experts per rank as the forward runs them, the gather of every pair's [D]) at batch 1, 8, 32 and 64; CUDA-event
// times per rank (docs/fabric.md "Choosing the expert split").
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "backends/cuda/kernels/block/moe_experts.cuh"
#include "backends/cuda/model/synth_fill.cuh"
#include "fabric/nccl/nccl_collective.h"
#include "tp_testing.h"

namespace dsv4::fabric::tp_testing {
namespace {

struct ExpertSet {
  std::vector<cuda::Fp4View> w1, w3, w2;  // host copies of the views
  cuda::Fp4View *d1 = nullptr, *d3 = nullptr, *d2 = nullptr;
};

// n experts of [I, D] / [D, I] FP4 weights with random codes and scales near 1.
bool make_experts(int64_t n, int64_t I, int64_t D, uint64_t seed, ExpertSet& set, cudaStream_t s) {
  auto one = [&](int64_t out, int64_t in, uint64_t sd) {
    cuda::Fp4View v;
    v.out = out;
    v.in = in;
    uint8_t *w = nullptr, *sc = nullptr;
    if (cudaMalloc(&w, out * in / 2) != cudaSuccess || cudaMalloc(&sc, out * in / 32) != cudaSuccess) return v;
    cuda::synth_fill(w, out * in / 2, cuda::FillKind::e2m1x2, sd, s);
    cuda::synth_fill(sc, out * in / 32, cuda::FillKind::ue8m0, sd + 1, s);
    v.w = w;
    v.scale = sc;
    return v;
  };
  for (int64_t e = 0; e < n; ++e) {
    set.w1.push_back(one(I, D, seed + 10 * e));
    set.w3.push_back(one(I, D, seed + 10 * e + 3));
    set.w2.push_back(one(D, I, seed + 10 * e + 6));
    if (!set.w1.back().w || !set.w3.back().w || !set.w2.back().w) return false;
  }
  const size_t b = static_cast<size_t>(n) * sizeof(cuda::Fp4View);
  cudaMalloc(&set.d1, b);
  cudaMalloc(&set.d3, b);
  cudaMalloc(&set.d2, b);
  cudaMemcpy(set.d1, set.w1.data(), b, cudaMemcpyHostToDevice);
  cudaMemcpy(set.d3, set.w3.data(), b, cudaMemcpyHostToDevice);
  cudaMemcpy(set.d2, set.w2.data(), b, cudaMemcpyHostToDevice);
  return cudaDeviceSynchronize() == cudaSuccess;
}

}  // namespace

int run_moe_bench(Control& control, const std::shared_ptr<NcclComm>& comm) {
  const int rank = control.rank(), tp = control.world();
  const int64_t D = 5120, E = 384, I = 2304, K = 6;
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  ExpertSet tpi, ep;  // tp_intermediate: all E experts, I / tp wide; expert_parallel: E / tp whole experts
  if (!make_experts(E, I / tp, D, 1000 + rank, tpi, s) || !make_experts(E / tp, I, D, 5000 + rank, ep, s)) {
    std::printf("FAIL rank %d: cannot allocate the expert weights\n", rank);
    return 1;
  }
  // expert_parallel as the forward runs it: views of all E experts with global ids, empty where another rank
  // holds the expert (those pairs are marked -1 and skipped).
  {
    std::vector<cuda::Fp4View> v1(E), v2(E), v3(E);
    for (int64_t e = 0; e < E / tp; ++e) {
      v1[rank * (E / tp) + e] = ep.w1[e];
      v2[rank * (E / tp) + e] = ep.w2[e];
      v3[rank * (E / tp) + e] = ep.w3[e];
    }
    const size_t b = static_cast<size_t>(E) * sizeof(cuda::Fp4View);
    cudaMalloc(&ep.d1, b);
    cudaMalloc(&ep.d2, b);
    cudaMalloc(&ep.d3, b);
    cudaMemcpy(ep.d1, v1.data(), b, cudaMemcpyHostToDevice);
    cudaMemcpy(ep.d2, v2.data(), b, cudaMemcpyHostToDevice);
    cudaMemcpy(ep.d3, v3.data(), b, cudaMemcpyHostToDevice);
  }
  auto coll = NcclCollective::create(comm, 64 * D);
  if (!coll.ok()) return 1;
  const int64_t max_pairs = 64 * K;
  float *x = nullptr, *scratch = nullptr, *out = nullptr, *y = nullptr, *gathered = nullptr;
  cudaMalloc(&gathered, static_cast<size_t>(tp) * max_pairs * D * 4);
  int32_t *prow = nullptr, *pexp = nullptr;
  float* pw = nullptr;
  cudaMalloc(&x, 64 * D * 4);
  cudaMalloc(&scratch, max_pairs * 3 * I * 4);
  cudaMalloc(&out, max_pairs * D * 4);
  cudaMalloc(&y, 64 * D * 4);
  cudaMalloc(&prow, max_pairs * 4);
  cudaMalloc(&pexp, max_pairs * 4);
  cudaMalloc(&pw, max_pairs * 4);
  // x: bf16-valued activations of magnitude ~2^-7..2^-5 (synth f32 fill rounded by the kernels' act quant).
  cuda::synth_fill(x, 64 * D * 4, cuda::FillKind::f32, 77, s);
  cudaStreamSynchronize(s);
  if (rank == 0)
    std::printf("moe-bench: routed experts of one layer (D %lld, %lld experts, I %lld, %lld active), %d ranks; "
                "per step: tp_intermediate = the rank's expert slices + the rank-ordered sum of [batch, D]; "
                "expert_parallel = the rank's experts (other pairs skipped) + the gather of every pair's [D]\n",
                static_cast<long long>(D), static_cast<long long>(E), static_cast<long long>(I),
                static_cast<long long>(K), tp);
  for (int64_t B : {1, 8, 32, 64}) {
    // Routing: K distinct experts per row from a fixed hash (uniform over E), the same on every rank.
    std::vector<std::pair<int32_t, int32_t>> pairs;  // (expert, row)
    for (int64_t r = 0; r < B; ++r) {
      std::vector<int32_t> chosen;
      uint64_t h = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(r + 1);
      while (static_cast<int64_t>(chosen.size()) < K) {
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 29;
        const int32_t e = static_cast<int32_t>(h % static_cast<uint64_t>(E));
        if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
      }
      for (int32_t e : chosen) pairs.push_back({e, static_cast<int32_t>(r)});
    }
    std::sort(pairs.begin(), pairs.end());
    double ms[2] = {0, 0}, experts_ms[2] = {0, 0};
    int64_t rank_pairs[2] = {0, 0};
    for (int mode = 0; mode < 2; ++mode) {  // 0 tp_intermediate, 1 expert_parallel
      std::vector<int32_t> hr, he;
      std::vector<float> hw;
      const int64_t per = E / tp;
      int64_t held = 0;
      for (const auto& [e, r] : pairs) {
        const bool mine = mode == 0 || e / per == rank;
        held += mine;
        he.push_back(mine ? e : -1);
        hr.push_back(r);
        hw.push_back(0.25f);
      }
      const int64_t P = static_cast<int64_t>(hr.size());
      rank_pairs[mode] = held;
      if (P) {
        cudaMemcpy(prow, hr.data(), P * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(pexp, he.data(), P * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(pw, hw.data(), P * 4, cudaMemcpyHostToDevice);
      }
      const ExpertSet& set = mode == 0 ? tpi : ep;
      const int64_t Iw = mode == 0 ? I / tp : I;
      auto experts = [&]() -> bool {
        return !P || cuda::moe_routed_experts(x, prow, pexp, pw, P, set.d1, set.d3, set.d2, D, Iw, 32, 10.0f,
                                              scratch, out, s) == cudaSuccess;
      };
      cudaEvent_t a, b;
      cudaEventCreate(&a);
      cudaEventCreate(&b);
      const int iters = 50;
      bool ok = true;
      // Experts alone (no collective).
      for (int i = 0; i < 5; ++i) ok = ok && experts();
      cudaEventRecord(a, s);
      for (int i = 0; i < iters; ++i) ok = ok && experts();
      cudaEventRecord(b, s);
      cudaEventSynchronize(b);
      float t = 0;
      cudaEventElapsedTime(&t, a, b);
      experts_ms[mode] = t / iters;
      // A step: experts, then the rank sum of y [B, D] (the combine itself is negligible and identical).
      auto step = [&]() -> bool {
        if (!experts()) return false;
        if (mode == 0) return (*coll)->all_reduce_ordered(y, B * D, s).ok();
        return (*coll)->all_gather(out, P * D, gathered, s).ok();
      };
      for (int i = 0; i < 5; ++i) ok = ok && step();
      ok = ok && comm->wait(s, std::chrono::seconds(30)).ok();
      cudaEventRecord(a, s);
      for (int i = 0; i < iters; ++i) ok = ok && step();
      cudaEventRecord(b, s);
      ok = ok && comm->wait(s, std::chrono::seconds(60)).ok();
      cudaEventElapsedTime(&t, a, b);
      ms[mode] = t / iters;
      CHECK_TRUE(ok, "rank %d: batch %lld mode %d failed", rank, static_cast<long long>(B), mode);
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
    std::printf("moe-bench rank %d batch %2lld: tp_intermediate %4lld pairs, experts %.3f ms, step %.3f ms | "
                "expert_parallel %4lld pairs, experts %.3f ms, step %.3f ms\n",
                rank, static_cast<long long>(B), static_cast<long long>(rank_pairs[0]), experts_ms[0], ms[0],
                static_cast<long long>(rank_pairs[1]), experts_ms[1], ms[1]);
  }
  auto done = control.all_gather({});
  CHECK_TRUE(done.ok(), "final barrier");
  return failures() == 0 ? 0 : 1;
}

}  // namespace dsv4::fabric::tp_testing
