// EXL3 linears of a pack on the device: the view a weights.h view points to when its linear is EXL3,
// the per-stream scratch the call needs, and the call that stands in for the FP8/FP4/bf16/fp32 kinds.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "backends/cuda/exl3/exl3_gemm.cuh"

namespace dsv4::cuda {

// Device scratch of the EXL3 calls, one buffer per CUDA stream (calls on one stream are ordered,
// so they share it; calls on different streams never do). A buffer is allocated on a stream's
// first call, which must not be under graph capture (an eager call comes first).
class Exl3Scratch {
 public:
  Exl3Scratch() = default;
  ~Exl3Scratch();
  Exl3Scratch(const Exl3Scratch&) = delete;
  Exl3Scratch& operator=(const Exl3Scratch&) = delete;

  // Records a linear needing `row_bytes` per row plus `fixed_bytes` (before any buffer exists).
  void require(size_t row_bytes, size_t fixed_bytes);
  // The buffer of stream s and its size; cudaErrorStreamCaptureUnsupported when s is capturing
  // and has none yet.
  cudaError_t buffer(cudaStream_t s, void** out, size_t* bytes);
  // At least 64 MiB and room for one row of the widest linear: a call runs its rows in chunks of
  // whatever fits (each row's arithmetic is the same in any chunk).
  size_t bytes() const;

 private:
  mutable std::mutex mu_;
  size_t row_bytes_ = 0, fixed_bytes_ = 0;
  struct Buffer {
    cudaStream_t stream;
    void* p;
    size_t bytes;
  };
  std::vector<Buffer> buffers_;
};

// One block-diagonal part: it reads inputs [x0, x0 + in) and writes outputs [y0, y0 + out).
struct Exl3ViewPart {
  Exl3Weights w;                // padded to multiples of 128 (padded inputs zero, padded outputs dropped)
  int64_t in = 0, out = 0;      // logical dims
  int64_t x0 = 0, y0 = 0;
  const float* bias = nullptr;  // f32 [out] (fp16 values), or null
};

// An EXL3 linear [in, out] of one or more parts (attn.wo_a: one per output group).
struct Exl3View {
  const Exl3ViewPart* parts = nullptr;  // host array [n_parts]
  int32_t n_parts = 0;
  int64_t in = 0, out = 0;              // totals over the parts
  const Exl3View* groups = nullptr;     // host array [n_parts] of each part alone (x0 = y0 = 0), or null
  Exl3Scratch* scratch = nullptr;
  // Part g as a linear of its own: a grouped caller's slice of a block-diagonal weight.
  const Exl3View* group(int64_t g) const { return groups ? groups + g : this; }
};

// Host objects the views point to; owned with the arena holding their device tensors.
struct Exl3Store {
  std::deque<std::vector<Exl3ViewPart>> parts;
  std::deque<Exl3View> views;
  std::deque<std::vector<Exl3View>> groups;
  Exl3Scratch scratch;
};

// How the output is stored: bf16 values (the FP8/FP4/bf16 kinds) or fp32 as computed (fp32 kind).
enum class Exl3Out : int { bf16, f32 };

// y[rows, W.out] = x[rows, W.in]·W (the oracle's exl3_linear_bf16 / _acc with Acc = float): per part,
// the part's input columns zero-padded, exl3_gemm, bias, the first `out` columns to the part's
// outputs. Batch-invariant (every row as alone). x and y must not overlap.
cudaError_t exl3_linear(const float* x, int64_t rows, const Exl3View& W, float* y, Exl3Out kind, cudaStream_t s);

// Bytes per row and fixed bytes of one view's call (what Exl3Scratch::require records).
std::pair<size_t, size_t> exl3_scratch_need(const Exl3View& W);

}  // namespace dsv4::cuda
