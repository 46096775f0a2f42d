#include "backends/cuda/runtime/dense_rate.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "backends/cuda/runtime/device_buffer.h"
#include "backends/cuda/runtime/stream.h"

namespace dsv4::cuda {
namespace {

// `elems` random finite values into b (the tensor cores' power, and so their clock, depends on the data:
// zeros would read fast): e4m3 codes other than NaN, or bf16 of magnitude 2^-7 .. 1.
bool fill_random(const DeviceBuffer& b, size_t elems, bool fp8) {
  uint64_t x = 0x9E3779B97F4A7C15ull;
  auto next = [&] { x ^= x << 13, x ^= x >> 7, x ^= x << 17; return x; };
  if (fp8) {
    std::vector<uint8_t> h(elems);
    for (auto& v : h) {
      v = static_cast<uint8_t>(next());
      if ((v & 0x7F) == 0x7F) v ^= 0x01;
    }
    return cudaMemcpy(b.get(), h.data(), elems, cudaMemcpyHostToDevice) == cudaSuccess;
  }
  std::vector<uint16_t> h(elems);
  for (auto& v : h) {
    const uint64_t r = next();
    v = static_cast<uint16_t>((r & 0x807F) | ((120 + ((r >> 8) & 7)) << 7));
  }
  return cudaMemcpy(b.get(), h.data(), elems * 2, cudaMemcpyHostToDevice) == cudaSuccess;
}

// FLOP/s of 2 n^3 per call on s: median of 5 calls timed with events after one warm-up; 0 if a call fails.
double rate_of(int n, const Stream& s, const std::function<bool()>& call) {
  auto a = Event::create(), b = Event::create();
  if (!a.ok() || !b.ok() || !call() || !s.synchronize("dense rate warm-up").ok()) return 0;
  std::vector<float> ms;
  for (int i = 0; i < 5; ++i) {
    float t = 0;
    if (!a->record(s.get()).ok() || !call() || !b->record(s.get()).ok() || cudaEventSynchronize(b->get()) != cudaSuccess ||
        cudaEventElapsedTime(&t, a->get(), b->get()) != cudaSuccess)
      return 0;
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return 2.0 * n * double(n) * n / (ms[2] * 1e-3);
}

}  // namespace

double dense_bf16_rate(int n) {
  const size_t elems = size_t(n) * n;
  DeviceBuffer a(elems * 2), b(elems * 2), c(elems * 2);
  auto st = Stream::create();
  if (!a || !b || !c || !st.ok() || !fill_random(a, elems, false) || !fill_random(b, elems, false)) return 0;
  cublasHandle_t h = nullptr;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0;
  cublasSetStream(h, st->get());
  const float one = 1, zero = 0;
  const double r = rate_of(n, *st, [&] {
    return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.get(), CUDA_R_16BF, n, b.get(), CUDA_R_16BF, n,
                        &zero, c.get(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
  });
  cublasDestroy(h);
  return r;
}

double dense_fp8_rate(int n) {
  const size_t elems = size_t(n) * n;
  constexpr size_t kWorkspace = size_t(32) << 20;
  DeviceBuffer a(elems), b(elems), d(elems * 2), ws(kWorkspace);
  auto st = Stream::create();
  if (!a || !b || !d || !ws || !st.ok() || !fill_random(a, elems, true) || !fill_random(b, elems, true)) return 0;
  cublasLtHandle_t h = nullptr;
  if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const size_t wsb = kWorkspace;
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  const bool ok =
      cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, n, n, n) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, n, n, n) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, n, n, n) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb) ==
          CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &heur, &found) == CUBLAS_STATUS_SUCCESS && found > 0;
  double r = 0;
  if (ok) {
    const float one = 1, zero = 0;
    r = rate_of(n, *st, [&] {
      return cublasLtMatmul(h, op, &one, a.get(), la, b.get(), lb, &zero, d.get(), ld, d.get(), ld, &heur.algo, ws.get(),
                            kWorkspace, st->get()) == CUBLAS_STATUS_SUCCESS;
    });
  }
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (ld) cublasLtMatrixLayoutDestroy(ld);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (op) cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(h);
  return r;
}

}  // namespace dsv4::cuda
