// Median time of one call, measured by replaying a CUDA graph of many captured calls (so launch
// overhead between calls is that of graph nodes, not of the host).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

// Ends the benchmark with the failing call, its place and the CUDA error.
#define CHECK_CUDA(expr)                                                                         \
  do {                                                                                           \
    cudaError_t e_ = (expr);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

namespace dsv4::bench {

inline void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

// fn(i, stream) issues call i; three warm-up calls run eagerly, then `calls` calls are captured into
// one graph that is replayed `replays` times (after one warm replay). Returns the median replay time
// divided by `calls`, in microseconds.
inline double graph_median_us(const std::function<void(int, cudaStream_t)>& fn, int calls, int replays) {
  cudaStream_t s;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  for (int i = 0; i < 3; ++i) fn(i, s);
  check_cuda(cudaStreamSynchronize(s), "warm-up");
  cudaGraph_t g;
  cudaGraphExec_t ge;
  check_cuda(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
  for (int i = 0; i < calls; ++i) fn(i, s);
  check_cuda(cudaStreamEndCapture(s, &g), "end capture");
  check_cuda(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  check_cuda(cudaGraphLaunch(ge, s), "replay");
  std::vector<float> v;
  for (int rep = 0; rep < replays; ++rep) {
    cudaEventRecord(t0, s);
    check_cuda(cudaGraphLaunch(ge, s), "replay");
    cudaEventRecord(t1, s);
    check_cuda(cudaEventSynchronize(t1), "replay");
    float ms;
    cudaEventElapsedTime(&ms, t0, t1);
    v.push_back(ms);
  }
  std::sort(v.begin(), v.end());
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  return v[v.size() / 2] * 1e3 / calls;
}

}  // namespace dsv4::bench
