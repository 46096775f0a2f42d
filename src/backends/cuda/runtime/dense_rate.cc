#include "backends/cuda/runtime/dense_rate.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace dsv4::cuda {
namespace {

// Device memory released on every path, zeroed.
struct Buf {
  void* p = nullptr;
  explicit Buf(size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
    else cudaMemset(p, 0, bytes);
  }
  // Random finite values (the tensor cores' power, and so their clock, depends on the data: zeros
  // would read fast): e4m3 codes other than NaN, or bf16 of magnitude 2^-7 .. 1.
  bool fill(size_t elems, bool fp8) {
    uint64_t x = 0x9E3779B97F4A7C15ull;
    auto next = [&] { x ^= x << 13, x ^= x >> 7, x ^= x << 17; return x; };
    if (fp8) {
      std::vector<uint8_t> h(elems);
      for (auto& v : h) { v = static_cast<uint8_t>(next()); if ((v & 0x7F) == 0x7F) v ^= 0x01; }
      return cudaMemcpy(p, h.data(), elems, cudaMemcpyHostToDevice) == cudaSuccess;
    }
    std::vector<uint16_t> h(elems);
    for (auto& v : h) {
      const uint64_t r = next();
      v = static_cast<uint16_t>((r & 0x807F) | ((120 + ((r >> 8) & 7)) << 7));
    }
    return cudaMemcpy(p, h.data(), elems * 2, cudaMemcpyHostToDevice) == cudaSuccess;
  }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

// FLOP/s of 2 n^3 per call: median of 5 calls timed with events after one warm-up; 0 if a call fails.
double rate_of(int n, cudaStream_t s, const std::function<bool()>& call) {
  if (!call() || cudaStreamSynchronize(s) != cudaSuccess) return 0;
  cudaEvent_t a = nullptr, b = nullptr;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> ms;
  for (int i = 0; i < 5; ++i) {
    cudaEventRecord(a, s);
    const bool ok = call();
    cudaEventRecord(b, s);
    float t = 0;
    if (!ok || cudaEventSynchronize(b) != cudaSuccess || cudaEventElapsedTime(&t, a, b) != cudaSuccess) break;
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (ms.size() < 5) return 0;
  std::sort(ms.begin(), ms.end());
  return 2.0 * n * double(n) * n / (ms[2] * 1e-3);
}

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
  ~Stream() { if (s) cudaStreamDestroy(s); }
};

}  // namespace

double dense_bf16_rate(int n) {
  const size_t bytes = size_t(n) * n * 2;
  Buf a(bytes), b(bytes), c(bytes);
  Stream st;
  if (!a.p || !b.p || !c.p || !st.s || !a.fill(size_t(n) * n, false) || !b.fill(size_t(n) * n, false)) return 0;
  cublasHandle_t h = nullptr;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0;
  cublasSetStream(h, st.s);
  const float one = 1, zero = 0;
  const double r = rate_of(n, st.s, [&] {
    return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.p, CUDA_R_16BF, n, b.p, CUDA_R_16BF, n, &zero,
                        c.p, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
  });
  cublasDestroy(h);
  return r;
}

double dense_fp8_rate(int n) {
  const size_t elems = size_t(n) * n;
  constexpr size_t kWorkspace = size_t(32) << 20;
  Buf a(elems), b(elems), d(elems * 2), ws(kWorkspace);
  Stream st;
  if (!a.p || !b.p || !d.p || !ws.p || !st.s || !a.fill(elems, true) || !b.fill(elems, true)) return 0;
  cublasLtHandle_t h = nullptr;
  if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  double r = 0;
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const size_t wsb = kWorkspace;
  bool ok = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, n, n, n) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, n, n, n) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, n, n, n) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb) ==
                CUBLAS_STATUS_SUCCESS;
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  ok = ok && cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &heur, &found) == CUBLAS_STATUS_SUCCESS &&
       found > 0;
  if (ok) {
    const float one = 1, zero = 0;
    r = rate_of(n, st.s, [&] {
      return cublasLtMatmul(h, op, &one, a.p, la, b.p, lb, &zero, d.p, ld, d.p, ld, &heur.algo, ws.p, kWorkspace,
                            st.s) == CUBLAS_STATUS_SUCCESS;
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
