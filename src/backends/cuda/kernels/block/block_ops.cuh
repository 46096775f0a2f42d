// Kernels of the forward that are neither linears nor attention: embedding into the C streams,
// RMSNorm, mHC mixes (Sinkhorn), collapse and expand, DSpark taps, clamped SwiGLU, row gathers,
// Engram gather and gate, MoE routing and combine. Launchers take plain pointers and sizes.
//
// Every kernel computes each output row with one block (or a fixed set of blocks) whose
// reductions run in a fixed tree, so a row's bits never depend on the row count of the launch.
// Activations are float arrays holding bf16 values; "-> bf16" rounds to nearest even.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

// h bf16 [rows, C, D] = embed[ids[r]] in every stream; pi f32 [rows, C] = one-hot(0).
cudaError_t embed_streams(const uint16_t* embed, const int32_t* ids, int64_t rows, int C, int64_t D,
                          float* h, float* pi, cudaStream_t s);

// h[rows[k], c, :] = values[k] (bf16 [n, D]) for every stream c: given rows (an image span) replace their tokens'
// embedding after embed_streams (pi stays one-hot).
cudaError_t embed_given(const uint16_t* values, const int64_t* rows, int64_t n, int C, int64_t D, float* h,
                        cudaStream_t s);

// y bf16 [rows, n] = w * (x * rsqrt(mean(x^2) + eps)) (w may be null: weight 1); y may alias x.
cudaError_t rmsnorm_rows(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y,
                         cudaStream_t s);

// Mixing coefficients per row from m = fp32-linear(h; fn) [rows, C*(C+2)] and h bf16 [rows, C*D]:
// mix f32 [rows, C + C + C*C] = pre, post, A (source j, dest k) after Sinkhorn.
cudaError_t hc_mix_coefficients(const float* m, const float* h, int64_t rows, int C, int64_t D,
                                const float* base, float s0, float s1, float s2, float norm_eps,
                                float hc_eps, int iters, float* mix, cudaStream_t s);

// The mixes' fp32 GEMV fused with the row statistics, for C <= 4: m = h · fn^T [rows, C*(C+2)]
// and sum(h^2), each as kHcSplits fixed K-slices (partials f32 [rows, kHcSplits, C*(C+2) + 1])
// summed in slice order by hc_mix_from_partials. The slices depend on the shape only; a value's
// arithmetic (each of 256 threads sums its elements t, t + 256, ... of the slice by FMAs, then a
// warp xor tree and an xor tree over the zero-padded warp totals) depends on neither the launch's
// row count nor on which of the two kernels (hc_partials.cu) computes it.
constexpr int kHcSplits = 16;
constexpr int kHcMaxMix = 24;  // C*(C+2) for C <= 4
cudaError_t hc_mix_partials(const float* h, const float* fn, int64_t rows, int C, int64_t D, float* partials,
                            cudaStream_t s);
// mix as hc_mix_coefficients, from hc_mix_partials' output.
cudaError_t hc_mix_from_partials(const float* partials, int64_t rows, int C, int64_t D, const float* base, float s0,
                                 float s1, float s2, float norm_eps, float hc_eps, int iters, float* mix,
                                 cudaStream_t s);

// y bf16 [rows, D] = sum_c pi[r * pi_stride + c] * h[r, c, :].
cudaError_t hc_collapse(const float* h, const float* pi, int64_t pi_stride, int64_t rows, int C,
                        int64_t D, float* y, cudaStream_t s);

// hc_collapse then rmsnorm_rows in one launch (the same per-element arithmetic and reduction order as
// the two kernels): x bf16 [rows, D] = collapse, y bf16 [rows, D] = RMSNorm(x; w). C <= 4. A launch of
// few rows spreads each row over several blocks, each recomputing the row's statistic in the same
// order, so the bits never depend on the row count.
cudaError_t hc_collapse_rmsnorm(const float* h, const float* pi, int64_t pi_stride, int64_t rows, int C, int64_t D,
                                const float* w, float eps, float* x, float* y, cudaStream_t s);

// In place on h [rows, C, D]: h_k = bf16(post_k * y + sum_j A[j][k] h_j); mix as hc_mix_coefficients.
cudaError_t hc_expand(const float* y, const float* mix, int64_t rows, int C, int64_t D, float* h,
                      cudaStream_t s);

// pi f32 [rows, C] = the pre part of mix.
cudaError_t hc_take_pre(const float* mix, int64_t rows, int C, float* pi, cudaStream_t s);

// taps bf16 [rows, n_taps, D] slot t = bf16(sum_c h[r, c, :] / C).
cudaError_t dspark_tap(const float* h, int64_t rows, int C, int64_t D, int n_taps, int t, float* taps,
                       cudaStream_t s);

// v bf16 [rows, I] = weight * silu(min(a, L)) * clamp(u, -L, L) (no clamp when limit <= 0).
cudaError_t swiglu_rows(const float* a, const float* u, int64_t rows, int64_t I, float limit, float* v,
                        cudaStream_t s);

// out [n, width] = in[index[i], :] (float rows).
cudaError_t gather_rows(const float* in, const int64_t* index, int64_t n, int64_t width, float* out,
                        cudaStream_t s);

// Engram rows: u bf16 [rows * R, dim] = decode(table row table_rows[i]); codes/scales may be
// mapped host memory (only the listed rows are read).
cudaError_t engram_gather(const uint8_t* codes, const uint8_t* scales, const int64_t* table_rows,
                          int64_t n, int dim, float* u, cudaStream_t s);

// Engram gate (§3.4 f): kv bf16 [rows, (C+1) D] (keys per stream, then the value), qk f32 [C, D];
// h bf16 [rows, C, D] updated in place. masked u8 [rows] (may be null): the gate of a row with masked[r] != 0 is 0
// (image positions).
cudaError_t engram_gate(const float* kv, const float* qk, int64_t rows, int C, int64_t D, float eps,
                        const uint8_t* masked, float* h, cudaStream_t s);

// MoE router per row: scores sqrt(softplus(logits)), + bias (bias_vl on image rows; image may be
// null), top-K by the biased score (ties to the lower expert), weights normalised over the K
// (K > 1) and times route_scale. sel int32 [rows, K], wts f32 [rows, K] in descending order.
cudaError_t moe_route(const float* logits, int64_t rows, int64_t E, int K, const float* bias,
                      const float* bias_vl, const uint8_t* image, float route_scale, int32_t* sel,
                      float* wts, cudaStream_t s);

// (row, slot) pairs sorted by (expert, row, slot): pair_row/pair_expert/pair_weight [rows*K] and, per
// (row, slot), its pair index pair_of [rows*K] (entries whose expert is outside [0, E) are left out).
// Deterministic: the result depends only on sel and wts. scratch: moe_pairs_scratch(rows, K, E) ints.
cudaError_t moe_pairs(const int32_t* sel, const float* wts, int64_t rows, int K, int64_t E,
                      int32_t* pair_row, int32_t* pair_expert, float* pair_weight, int32_t* pair_of,
                      int32_t* scratch, cudaStream_t s);
int64_t moe_pairs_scratch(int64_t rows, int K, int64_t E);

// moe_route then moe_pairs in one single-block launch (for few rows; the same device code per row
// and for the pairs, so the outputs equal the two launches').
cudaError_t moe_route_pairs(const float* logits, int64_t rows, int64_t E, int K, const float* bias,
                            const float* bias_vl, const uint8_t* image, float route_scale, int32_t* sel, float* wts,
                            int32_t* pair_row, int32_t* pair_expert, float* pair_weight, int32_t* pair_of,
                            cudaStream_t s);

// y bf16 [rows, D] = bf16( (sum over the row's experts in ascending expert order of out[pair])
// + shared[r] ); out bf16 [rows*K, D] by pair.
cudaError_t moe_combine(const float* out, const float* shared, const int32_t* sel, const int32_t* pair_of,
                        int64_t rows, int K, int64_t D, float* y, cudaStream_t s);

// moe_combine, hc_expand and hc_take_pre of the FFN sub-layer in one launch: the combined row y
// (as moe_combine, never stored) expanded into h [rows, C, D] with mix (as hc_expand), and
// pi f32 [rows, C] = the pre part of mix.
cudaError_t moe_combine_expand(const float* out, const float* shared, const int32_t* sel, const int32_t* pair_of,
                               int64_t rows, int K, int64_t D, const float* mix, int C, float* h, float* pi,
                               cudaStream_t s);

}  // namespace dsv4::cuda
