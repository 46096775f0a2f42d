// EXL3 linear layers on CUDA: y = x·W for a trellis-coded W, decoded on the fly into tensor-core
// fragments, batch-invariant; and the routed experts of one MoE layer in grouped launches.
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
  // The out width the K split is chosen from (exl3_k_splits): the whole linear's when this is a
  // tensor-parallel rank's column slice of it (cpu::Exl3Part::k_split_out), so the slice's columns sum K
  // in the whole linear's order; 0 = out_features. A multiple of 128, at least out_features.
  int64_t split_out_features = 0;
};

// The number of K-slices whose partial sums are added in a fixed order (one thread-block cluster:
// at most 16 on compute capability 9.x/10.x, 8 elsewhere): a function of the weight's shape (and
// the device kind) only, never of the row count, so every output row's arithmetic is the same
// whatever the number of rows in the launch. The column count enters (fewer column blocks take more
// slices), so a column slice of a linear chooses from the whole linear's out width: the overload on
// Exl3Weights reads split_out_features.
int exl3_k_splits(int64_t in_features, int64_t out_features);
int exl3_k_splits(const Exl3Weights& w);

// The GEMM keeps its slice partials in shared memory; the workspace is kept in the interface
// (a few bytes, no state between calls, nothing to initialise) so callers need not change.
size_t exl3_workspace_bytes(const Exl3Weights& w, int64_t rows);
cudaError_t exl3_workspace_init(const Exl3Weights& w, void* workspace, cudaStream_t stream);

// y[rows, out] (fp32) = x[rows, in] (fp32) · W. Per row: per 128-block, u = H(x∘suh) split exactly
// into fp16 hi + lo at a power-of-two scale; v = u·Wq on tensor cores (fp32 accumulation, one fresh
// accumulator per 128-block, added in fp32), over fixed K-slices added in index order;
// y = H(v)/128 ∘ svh. x, y and w.trellis 16-byte aligned; the slices' fragments of 16 rows must
// fit one block's shared memory (in ≤ 16·128·16 = 32768 on Hopper).
// One launch; refused with cudaErrorInvalidValue for bad shapes or alignment.
cudaError_t exl3_gemm(const Exl3Weights& w, const float* x, int64_t rows, float* y, void* workspace,
                      cudaStream_t stream);

// The kind of an EXL3 linear for the grouped launch: bit 3·(bits − 1) + codebook of a 24-bit mask.
constexpr uint32_t exl3_kind_bit(int bits, int codebook) { return 1u << (3 * (bits - 1) + codebook); }

// The routed experts of one MoE layer: device arrays [E] of the uploaded weights. Every expert of a
// projection has the padded shape of w1 [dim_p, inter_p], w3 [dim_p, inter_p], w2 [inter_p, dim_p];
// bit widths and codebooks may differ between experts (the Mia layout mixes 2 and 3 bits): the
// launch runs once per kind present, each over the segments of the experts of that kind. On a
// tensor-parallel rank the experts other ranks hold are entries of zeros (null pointers, bits 0).
struct Exl3ExpertsView {
  const Exl3Weights* w1 = nullptr;  // gate, device [E]
  const Exl3Weights* w3 = nullptr;  // up, device [E]
  const Exl3Weights* w2 = nullptr;  // down, device [E]
  int64_t n_experts = 0;            // 0: the layer's experts are not EXL3
  int64_t dim = 0, inter = 0;       // logical (inputs past them read as zero, outputs past them dropped)
  int64_t dim_p = 0, inter_p = 0;   // padded to multiples of 128
  uint32_t kinds[3] = {0, 0, 0};    // exl3_kind_bit masks of the experts of w1, w3, w2
  bool gate_up_same_kind = false;   // every expert's w1 and w3 of one kind: gate and up in one launch
};

// Scratch bytes for exl3_routed_experts: a, u [n_pairs, inter_p] and the segment table.
size_t exl3_routed_experts_scratch_bytes(int64_t n_pairs, const Exl3ExpertsView& X);

// Pairs sorted by expert (then row); for pair p with r = pair_row[p], e = pair_expert[p]:
//   a = bf16(x[r]·W1[e]), u = bf16(x[r]·W3[e])                    (each exactly exl3_gemm's row)
//   h = swiglu_clamped(a, u, pair_weight[p], swiglu_limit)           (bf16, cpu::swiglu_clamped<float>)
//   out[p] = bf16(h·W2[e])                                           (float [n_pairs, dim])
// Pairs with pair_expert[p] < 0 (a tensor-parallel rank's pairs of experts other ranks hold, tp_own_pairs:
// runs of -1 between the sorted runs) are skipped and out[p] is left as it was; so are pairs of an expert
// uploaded empty (bits 0: not held on this rank).
// x: float [rows, dim] (logical width, zero-padded on the fly). One segment-table launch, then one
// gate+up and one down launch per kind; each pair's arithmetic is that of exl3_gemm on its
// (zero-padded) row alone, independent of the other pairs. x, scratch and out 16-byte aligned.
cudaError_t exl3_routed_experts(const float* x, const int32_t* pair_row, const int32_t* pair_expert,
                                const float* pair_weight, int64_t n_pairs, const Exl3ExpertsView& X,
                                float swiglu_limit, void* scratch, float* out, cudaStream_t stream);

}  // namespace dsv4::cuda
