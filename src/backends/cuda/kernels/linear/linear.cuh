// The four linears of model-spec.md §3.1 on CUDA: y = the oracle's cpu::*_linear with Acc = float.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/model/weights.h"

namespace dsv4::cuda {

// x: float [rows, W.in] holding bf16 values; y: float [rows, W.out] holding bf16 values.
// Batch-invariant: every output element's arithmetic (act_quant of its row, then a fixed K order
// of exact products, power-of-two block scales applied per 16-byte weight unit, a fixed lane tree)
// depends only on the weight's shape, never on `rows`, on the other rows, or on the grid.
// Refused with cudaErrorInvalidValue (nothing launched): FP8/FP4 with act_block not 32, 64 or 128,
// W.in not a multiple of act_block (FP8 also W.block not 32 times a power of two), a
// bf16 / fp32 W.in not a multiple of 8 / 4, x or W.w not 16-byte aligned.
// rows == 0 launches nothing. All four return the launch's cudaGetLastError().

// FP8 block-scaled: per row act_quant(x, act_block) (e4m3 codes, ue8m0 scales, as cpu::act_quant_row).
cudaError_t fp8_linear(const float* x, int64_t rows, const Fp8View& W, int act_block, float* y, cudaStream_t s);
// The shared expert's gate and up: fp8_linear of W1 and of W3 (same shape, same block) over the same
// rows, in one launch at up to 32 rows (the staged rows shared); y1 / y3 bit for bit those of two
// fp8_linear calls. Refused as fp8_linear, or when W1 and W3 differ in shape or block.
cudaError_t fp8_linear_pair(const float* x, int64_t rows, const Fp8View& W1, const Fp8View& W3, int act_block,
                            float* y1, float* y3, cudaStream_t s);
// FP4 experts: e2m1 weights with a ue8m0 scale per 32 along K; activations act_quant'ed per act_block.
cudaError_t fp4_linear(const float* x, int64_t rows, const Fp4View& W, int act_block, float* y, cudaStream_t s);
// Benchmarks only: the FP8 / FP4 row kernels (fp8_linear, fp4_linear, fp8_linear_pair,
// moe_routed_experts at up to 255 pairs) take K slices per warp `slices_per_warp` (1, 2, 4) and a
// weight ring of `ring_depth` stages where the shape allows; 0, 0 restores the planner's choice.
// Speed only: every output's bits are the same under any setting.
void set_lowp_layout_override(int slices_per_warp, int ring_depth);
// Benchmarks only: the row count above which the FP8/FP4 linears run the 64 x 64 prefill tiles
// (set_lowp_tile_rows) and the bf16 linears their tile kernel (set_bf16_tile_rows); 0: the defaults;
// negative (set_lowp_tile_rows only): every row count, down to 1.
// Speed only: a row's bits are the same on either path (linear_cuda_test, wide_linear_test).
void set_lowp_tile_rows(int64_t rows);
// Benchmarks and tests only: whether the FP8 / FP4 linears above the row kernels' range (and
// moe_routed_experts from its tile pairs on) run the many-row GEMM (lowp_gemm.cuh: rows act_quant'ed
// once per launch, 128-column tiles, a multi-stage pipeline; the default) or the 64 x 64 prefill
// tiles (lowp_prefill.cuh). DSV4_LOWP_GEMM=0 in the environment makes the prefill tiles the default.
// Speed only: every output gets the same bits on either path (lowp_gemm_cuda_test).
void set_lowp_gemm(bool on);
// Tests and benchmarks only: whether the many-row GEMM runs on the warpgroup MMA (lowp_wgmma.cuh; compute
// capability 9.0 only) or on mma.sync (lowp_gemm.cuh's gemm_tile; the default: faster today, docs/perf.md).
// DSV4_LOWP_WGMMA=1 in the environment makes the warpgroup MMA the default. Speed only: the same bits.
void set_lowp_gemm_wgmma(bool on);
// Whether the many-row GEMM runs on the warpgroup MMA now (the device has it and it is switched on).
bool lowp_gemm_wgmma_active();
// Tests and benchmarks only: the many-row GEMM's rows per CTA (32, 64 or 128) for every launch; 0
// restores its choice. Speed only.
void set_lowp_gemm_tile_rows(int rows);
// Benchmarks and tests only: which kernel the FP8 / FP4 linears at up to 32 rows (and moe_routed_experts
// below its tile pairs) run: one CTA per 16-column tile (rows_tile), the streaming kernel
// (lowp_stream.cuh: resident CTAs, each a run of (row pass, 16-column tile) items), or the automatic
// choice between them (the default; lowp::use_stream). Speed only: every element gets the same bits.
enum class RowKernel { tiles, automatic, stream };
void set_lowp_row_kernel(RowKernel k);
void set_bf16_tile_rows(int64_t rows);
// bf16 weights and inputs, float accumulation, -> bf16. W.in a multiple of 8.
cudaError_t bf16_linear(const float* x, int64_t rows, const Bf16View& W, float* y, cudaStream_t s);
// bf16_linear's sum before its rounding: y holds the fp32 totals (a caller adds a bias, then rounds once).
// round_bf16 of each element is bit for bit bf16_linear's. Refused as bf16_linear, and for EXL3 views.
cudaError_t bf16_linear_f32(const float* x, int64_t rows, const Bf16View& W, float* y, cudaStream_t s);
// A block-diagonal bf16 linear in one launch (attention's grouped wo_a): W [groups * out, in] holds
// `groups` weights of [out, in] (out = W.out / groups); x float [groups, rows, W.in] (group-major);
// y float [rows, W.out], group g's outputs at columns [g out, (g + 1) out). Each group's values are
// bit for bit bf16_linear(x + g rows in, rows, {W.w + g out in, out, in}). Refused: W.exl3 set,
// W.out not a multiple of groups (and what bf16_linear refuses).
cudaError_t bf16_grouped_linear(const float* x, int64_t rows, const Bf16View& W, int64_t groups, float* y,
                                cudaStream_t s);
// fp32 weights, inputs and outputs, no rounding (y fp32). W.in a multiple of 4.
cudaError_t f32_linear(const float* x, int64_t rows, const F32View& W, float* y, cudaStream_t s);
// The same fp32 linear reading bf16-stored weights (widened exactly): half the bytes of an F32View
// for checkpoint bf16 weights such as the LM head. W.in a multiple of 8.
cudaError_t f32_linear(const float* x, int64_t rows, const Bf16View& W, float* y, cudaStream_t s);

}  // namespace dsv4::cuda
