// EXL3 linear layers on CUDA: y = x·W for a trellis-coded W, decoded on the fly, batch-invariant.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace dsv4::cuda {

// One EXL3 linear resident on the device (formats.md §1): W [in, out], y = x·W.
struct Exl3Weights {
  const uint16_t* trellis = nullptr;  // i16 [in/16, out/16, 16·bits]
  const uint16_t* suh = nullptr;      // f16 [in]
  const uint16_t* svh = nullptr;      // f16 [out]
  int64_t in_features = 0;            // multiple of 128
  int64_t out_features = 0;           // multiple of 128
  int bits = 0;                       // 1..8
  int codebook = 0;                   // 0 = 3INST, 1 = MCG, 2 = mul1 (exl3::Codebook order)
};

// The number of K-slices whose partial sums are reduced in a fixed order: a function of the
// weight's shape only, never of the row count, so every output row's arithmetic is the same
// whatever the number of rows in the launch.
int exl3_k_splits(int64_t in_features, int64_t out_features);

// Device scratch bytes exl3_gemm needs for `rows` rows: completion tickets, then slice partials.
size_t exl3_workspace_bytes(const Exl3Weights& w, int64_t rows);
// Zeroes the tickets of a freshly allocated workspace; exl3_gemm leaves them zero after each call.
cudaError_t exl3_workspace_init(const Exl3Weights& w, void* workspace, cudaStream_t stream);

// y[rows, out] (fp32) = x[rows, in] (fp32) · W. `workspace` holds exl3_workspace_bytes(w, rows).
// Per row: u = H(x∘suh) per 128-block; v = u·Wq over fixed K-slices, each summed in tile order;
// slices added in index order; y = H(v)/128 ∘ svh. One launch; calls on one workspace must not overlap.
cudaError_t exl3_gemm(const Exl3Weights& w, const float* x, int64_t rows, float* y, void* workspace,
                      cudaStream_t stream);

}  // namespace dsv4::cuda
