// Speed of the grouped EXL3 routed experts (exl3_routed_experts) on the V4.1 full-width shapes:
// E = 384 experts of [5120 -> 2304 -> 5120], 2 bits (even ids) / 3 bits (odd ids) as the Mia layout,
// mul1 codebook; 1, 8 and 32 rows each routed to 6 distinct random experts. Trellis bytes are
// whatever memset leaves (the decode does the same work for any codes); several routings per run so
// consecutive calls touch different experts. Timed as a CUDA graph of 20 calls (CUDA events).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <tuple>
#include <vector>

#include "backends/cuda/runtime/device_buffer.h"
#include "backends/cuda/exl3/exl3_gemm.cuh"
#include "bench_device.h"
#include "graph_timing.h"
#include "routing.h"

namespace {

using namespace dsv4::cuda;

std::vector<DeviceBuffer> g_keep;

void* device_fill(size_t bytes, int byte) {
  g_keep.emplace_back(std::max<size_t>(bytes, 16));
  void* d = g_keep.back().get();
  if (!d) {
    std::fprintf(stderr, "out of device memory\n");
    std::exit(1);
  }
  CHECK_CUDA(cudaMemset(d, byte, bytes));
  return d;
}

template <typename T>
T* device_copy(const std::vector<T>& v) {
  auto* d = static_cast<T*>(device_fill(v.size() * sizeof(T), 0));
  CHECK_CUDA(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// Median microseconds per call of fn(i), timed as one CUDA graph of `calls` launches.
template <typename F>
double time_us(F&& fn, int calls = 20) {
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < 3; ++i) fn(i, s);
  CHECK_CUDA(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) fn(i, s);
  CHECK_CUDA(cudaStreamEndCapture(s, &g));
  CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  CHECK_CUDA(cudaGraphLaunch(ge, s));
  std::vector<float> v;
  for (int rep = 0; rep < 5; ++rep) {
    cudaEventRecord(t0, s);
    CHECK_CUDA(cudaGraphLaunch(ge, s));
    cudaEventRecord(t1, s);
    CHECK_CUDA(cudaEventSynchronize(t1));
    float ms;
    cudaEventElapsedTime(&ms, t0, t1);
    v.push_back(ms);
  }
  std::sort(v.begin(), v.end());
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  return v[v.size() / 2] * 1e3 / calls;
}

}  // namespace

int main() {
  const cudaDeviceProp prop = dsv4::bench::bench_device();
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const int64_t E = 384, D = 5120, I = 2304;
  auto bits_of = [](int64_t e) { return e % 2 == 0 ? 2 : 3; };
  std::vector<Exl3Weights> w1(E), w3(E), w2(E);
  for (int64_t e = 0; e < E; ++e) {
    const int b = bits_of(e);
    auto make = [&](int64_t in, int64_t out) {
      Exl3Weights w;
      w.trellis = static_cast<const uint16_t*>(device_fill(size_t(in) * out * b / 8, 0x5A));
      w.suh = static_cast<const uint16_t*>(device_fill(size_t(in) * 2, 0x3C));
      w.svh = static_cast<const uint16_t*>(device_fill(size_t(out) * 2, 0x3C));
      w.in_features = in;
      w.out_features = out;
      w.bits = b;
      w.codebook = 2;  // mul1
      return w;
    };
    w1[e] = make(D, I);
    w3[e] = make(D, I);
    w2[e] = make(I, D);
  }
  Exl3ExpertsView X;
  X.w1 = device_copy(w1);
  X.w3 = device_copy(w3);
  X.w2 = device_copy(w2);
  X.n_experts = E;
  X.dim = X.dim_p = D;
  X.inter = X.inter_p = I;
  for (int k = 0; k < 3; ++k) X.kinds[k] = exl3_kind_bit(2, 2) | exl3_kind_bit(3, 2);
  X.gate_up_same_kind = true;
  std::mt19937 rng(77);
  for (int rows : {1, 8, 32}) {
    const int kRoutings = 8;
    std::vector<std::tuple<int32_t*, int32_t*, float*, int64_t, double>> routes;
    for (int k = 0; k < kRoutings; ++k) {
      const dsv4::bench::RoutedPairs t = dsv4::bench::random_routing(rng, E, rows, 6);
      const std::vector<int32_t>& pr = t.row;
      const std::vector<int32_t>& pe = t.expert;
      double bytes = 0;
      for (size_t i = 0; i < pe.size(); ++i)
        if (i == 0 || pe[i] != pe[i - 1]) bytes += 3.0 * D * I * bits_of(pe[i]) / 8;
      routes.emplace_back(device_copy(pr), device_copy(pe), device_copy(std::vector<float>(pe.size(), 0.25f)),
                          static_cast<int64_t>(pe.size()), bytes);
    }
    const int64_t P = std::get<3>(routes[0]);
    auto* x = static_cast<float*>(device_fill(sizeof(float) * rows * D, 0));
    void* h = device_fill(exl3_routed_experts_scratch_bytes(P, X), 0);
    auto* out = static_cast<float*>(device_fill(sizeof(float) * P * D, 0));
    double bytes = 0;
    for (auto& r : routes) bytes += std::get<4>(r);
    bytes /= kRoutings;
    const double us = time_us([&](int i, cudaStream_t s) {
      auto& [pr, pe, pw, n, b] = routes[i % kRoutings];
      CHECK_CUDA(exl3_routed_experts(x, pr, pe, pw, n, X, 10.f, h, out, s));
    });
    std::printf("exl3 routed experts x6 per row  rows %3d  pairs %4lld  trellis %7.1f MB  %9.2f us  %7.0f GB/s\n", rows,
                static_cast<long long>(P), bytes / 1e6, us, bytes / us / 1e3);
  }
  return 0;
}
