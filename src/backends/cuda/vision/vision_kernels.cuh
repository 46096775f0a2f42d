// The vision tower's own kernels (model-spec.md §3.10), each following the CPU oracle's rounding points
// (backends/cpu/vision_ops.h, ref32): activations are bf16 values held in f32 arrays (q, k, v and the aligner
// rows as bf16 bits), weights bf16 as stored. Every output element is computed by one thread (or one warp or
// quad in a fixed tree) from its own row, or for attention from its own image, so an image's values never
// depend on the other images of a call. The linears are kernels/linear's bf16 tensor-core linears.
// Launchers return cudaGetLastError() of their launch; nothing is launched for empty sizes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda::vision {

// bf16 bits [n] -> f32 values [n] (exact).
cudaError_t widen_bf16(const uint16_t* in, int64_t n, float* out, cudaStream_t s);

// RMSNorm (eps as given) of `rows` rows of width V (a multiple of 32): y = bf16(w · (x · r)),
// r = 1 / sqrt(Σx² / V + eps) in f32; w bf16 [V]. One warp per row, a fixed lane order and xor tree.
cudaError_t rms_norm(const float* x, int64_t rows, int64_t V, const uint16_t* w, float eps, float* y,
                     cudaStream_t s);

// The 2-D RoPE table of one image's grid_h x grid_w patches (cpu::vision::rope_2d_table): for patch p and
// i < 32, angle = f32(i < 16 ? p / grid_w : p % grid_w) · inv_freq[i mod 16], cos and sin in double rounded
// to f32; table f32 [grid_h·grid_w, 32, 2] (cos, sin).
struct InvFreq {
  float v[16];
};
cudaError_t rope_table(int64_t grid_h, int64_t grid_w, InvFreq inv, float* table, cudaStream_t s);

// q, k, v of `rows` patches from the qkv linear's f32 sums [rows, 3V] and its bias bf16 [3V]: each value
// bf16(sum + bias); q and k rotated per head of 64 with `table` (element i with i + 32: bf16(a·c − b·s),
// bf16(b·c + a·s), products and sums rounded to f32 one at a time); bf16 bits [rows, V] each.
cudaError_t qkv_rope(const float* sums, int64_t rows, int64_t V, const uint16_t* bias, const float* table,
                     uint16_t* q, uint16_t* k, uint16_t* v, cudaStream_t s);

// Bidirectional attention of one image: n patches, H heads of 64, q/k/v bf16 bits [n, H·64], o f32 [n, H·64]
// holding bf16 values. Tensor cores: logits q·k (exact bf16 products, f32 sums) times 1/8, a streaming
// softmax over key tiles of 64 in order (f32), P·V with each probability as a sum of two bf16 parts, divided by
// the probabilities' f32 sum, rounded to bf16 once.
cudaError_t attention(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t n, int64_t H, float* o,
                      cudaStream_t s);

// h = bf16(sums + bias); x = bf16(x + h) over rows x V (bias bf16 [V]): a linear's bias and the residual add.
cudaError_t bias_residual(const float* sums, const uint16_t* bias, int64_t rows, int64_t V, float* x,
                          cudaStream_t s);
// x = bf16(x + h) over n values.
cudaError_t residual(const float* h, int64_t n, float* x, cudaStream_t s);
// y = bf16(sums + bias) over rows x cols (bias bf16 [cols]); as f32 values (y32) or bf16 bits (y16), one of them.
cudaError_t bias_round(const float* sums, const uint16_t* bias, int64_t rows, int64_t cols, float* y32,
                       uint16_t* y16, cudaStream_t s);
// m = bf16(bf16(silu(gate)) · up) with silu(x) = x / (1 + exp(−x)); g = [rows, 2I] (gate | up), m [rows, I].
cudaError_t swiglu(const float* g, int64_t rows, int64_t I, float* m, cudaStream_t s);
// In place over rows x cols: v = bf16(x + bias); x = bf16((v · 0.5) · (1 + erf(v · sqrt(1/2)))).
cudaError_t bias_gelu(float* x, const uint16_t* bias, int64_t rows, int64_t cols, cudaStream_t s);

// The aligner's input of one image (cpu::vision::unfold_blocks): x [gh·gw, V] zero-padded to multiples of r,
// one row per r x r block (row-major blocks), feature c·r² + r·kh + kw; u [ceil(gh/r)·ceil(gw/r), V·r²].
cudaError_t unfold(const float* x, int64_t gh, int64_t gw, int64_t V, int r, float* u, cudaStream_t s);

}  // namespace dsv4::cuda::vision
