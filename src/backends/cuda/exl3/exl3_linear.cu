// The EXL3 call behind the linear kinds: gather a part's inputs (zero-padded to 128), exl3_gemm, then
// bias, rounding and scatter of its logical outputs; rows in chunks that fit the stream's scratch.
#include <algorithm>

#include "backends/cuda/exl3/exl3_view.h"
#include "core/bf16.h"

namespace dsv4::cuda {
namespace {

constexpr size_t kMinScratch = size_t(64) << 20;
constexpr size_t kAlign = 256;
constexpr int kThreads = 256;

size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// xp[r, k] = x[r, x0 + k] for k < in, 0 up to in_p (the part's padded input).
__global__ void gather_pad(const float* __restrict__ x, int64_t ld, int64_t x0, int64_t in, int64_t in_p,
                           int64_t rows, float* __restrict__ xp) {
  const int64_t total = rows * in_p;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / in_p, k = i % in_p;
    xp[i] = k < in ? x[r * ld + x0 + k] : 0.f;
  }
}

// y[r, y0 + n] = store(yp[r, n] + bias[n]) for n < out; yp may be y itself (then ld == out_p, y0 0).
__global__ void finish(const float* yp, int64_t out_p, const float* __restrict__ bias, int64_t out, int64_t rows,
                       bool round, float* y, int64_t ld, int64_t y0) {
  const int64_t total = rows * out;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / out, n = i % out;
    float v = yp[r * out_p + n];
    if (bias) v += bias[n];
    y[r * ld + y0 + n] = round ? round_bf16(v) : v;
  }
}

unsigned grid_for(int64_t total) {
  return static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, 4096));
}

bool gathers(const Exl3View& W, const Exl3ViewPart& P) { return W.n_parts > 1 || P.in != P.w.in_features; }
bool pads_out(const Exl3View& W, const Exl3ViewPart& P) { return W.n_parts > 1 || P.out != P.w.out_features; }

}  // namespace

Exl3Scratch::~Exl3Scratch() {
  for (auto& b : buffers_) cudaFree(b.p);
}

void Exl3Scratch::require(size_t row_bytes, size_t fixed_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  row_bytes_ = std::max(row_bytes_, row_bytes);
  fixed_bytes_ = std::max(fixed_bytes_, fixed_bytes);
}

size_t Exl3Scratch::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::max(kMinScratch, row_bytes_ + fixed_bytes_);
}

cudaError_t Exl3Scratch::buffer(cudaStream_t s, void** out, size_t* bytes_out) {
  const size_t n = bytes();
  std::lock_guard<std::mutex> lock(mu_);
  for (const Buffer& b : buffers_)
    if (b.stream == s) {
      *out = b.p;
      *bytes_out = b.bytes;
      return cudaSuccess;
    }
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(s, &cs);
  if (err != cudaSuccess) return err;
  if (cs != cudaStreamCaptureStatusNone) return cudaErrorStreamCaptureUnsupported;
  void* p = nullptr;
  if ((err = cudaMalloc(&p, n)) != cudaSuccess) return err;
  if ((err = cudaMemsetAsync(p, 0, n, s)) != cudaSuccess) {  // on s: ordered before its users
    cudaFree(p);
    return err;
  }
  buffers_.push_back(Buffer{s, p, n});
  *out = p;
  *bytes_out = n;
  return cudaSuccess;
}

std::pair<size_t, size_t> exl3_scratch_need(const Exl3View& W) {
  size_t row = 0, fixed = 0;
  for (int32_t g = 0; g < W.n_parts; ++g) {
    const Exl3ViewPart& P = W.parts[g];
    const size_t ws0 = exl3_workspace_bytes(P.w, 0), ws1 = exl3_workspace_bytes(P.w, 1);
    row = std::max(row, (ws1 - ws0) + sizeof(float) * static_cast<size_t>(P.w.in_features + P.w.out_features));
    fixed = std::max(fixed, aligned(ws0) + 3 * kAlign);
  }
  return {row, fixed};
}

cudaError_t exl3_linear(const float* x, int64_t rows, const Exl3View& W, float* y, Exl3Out kind, cudaStream_t s) {
  if (rows < 0 || !W.parts || W.n_parts < 1 || !W.scratch) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  void* base = nullptr;
  size_t cap = 0;
  cudaError_t err = W.scratch->buffer(s, &base, &cap);
  if (err != cudaSuccess) return err;
  const bool round = kind == Exl3Out::bf16;
  for (int32_t g = 0; g < W.n_parts; ++g) {
    const Exl3ViewPart& P = W.parts[g];
    const int64_t in_p = P.w.in_features, out_p = P.w.out_features;
    const size_t ws0 = exl3_workspace_bytes(P.w, 0), ws_row = exl3_workspace_bytes(P.w, 1) - ws0;
    const size_t row_bytes = ws_row + sizeof(float) * static_cast<size_t>(in_p + out_p);
    const size_t fixed = aligned(ws0) + 3 * kAlign;
    if (cap < fixed + row_bytes) return cudaErrorInvalidValue;  // require() was not told of this view
    const int64_t chunk = std::min<int64_t>(rows, static_cast<int64_t>((cap - fixed) / row_bytes));
    const bool gather = gathers(W, P), pad = pads_out(W, P);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const int64_t n = std::min(chunk, rows - r0);
      char* p = static_cast<char*>(base);
      void* ws = p;
      float* xp = reinterpret_cast<float*>(p + aligned(ws0 + ws_row * n));
      float* yp = reinterpret_cast<float*>(reinterpret_cast<char*>(xp) + aligned(sizeof(float) * n * in_p));
      const float* xin = x + r0 * W.in;
      if (gather) {
        gather_pad<<<grid_for(n * in_p), kThreads, 0, s>>>(x + r0 * W.in, W.in, P.x0, P.in, in_p, n, xp);
        xin = xp;
      }
      float* yout = pad ? yp : y + r0 * W.out;
      if ((err = exl3_workspace_init(P.w, ws, s)) != cudaSuccess) return err;
      if ((err = exl3_gemm(P.w, xin, n, yout, ws, s)) != cudaSuccess) return err;
      if (pad || round || P.bias)
        finish<<<grid_for(n * P.out), kThreads, 0, s>>>(yout, out_p, P.bias, P.out, n, round, y + r0 * W.out, W.out,
                                                         P.y0);
      if ((err = cudaGetLastError()) != cudaSuccess) return err;
    }
  }
  return cudaSuccess;
}

}  // namespace dsv4::cuda
