// Routed experts of one MoE layer whose experts are EXL3 linears: every (row, expert) pair in one
// launch chain (gate/up + SwiGLU, then down), each CTA taking one expert's pairs for 128 columns.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/exl3_gemm.cuh"

namespace dsv4::cuda {

// The experts of one layer: device arrays [n_experts] of the uploaded weights (every expert's
// padded dims equal; no bias). w1, w3: [dim -> inter]; w2: [inter -> dim].
struct Exl3ExpertsView {
  const Exl3Weights* w1 = nullptr;
  const Exl3Weights* w3 = nullptr;
  const Exl3Weights* w2 = nullptr;
  int64_t n_experts = 0;        // 0: the layer's experts are not EXL3
  int64_t dim = 0, inter = 0;   // logical
  int64_t dim_p = 0, inter_p = 0;  // padded to 128
};

// Pairs sorted by (expert, row), as moe_routed_experts takes them; for pair p (r = pair_row[p],
// e = pair_expert[p]):
//   a = EXL3(x[r], w1[e]), u = EXL3(x[r], w3[e])                         (bf16 [inter] each)
//   h[p] = swiglu_clamped(a, u, pair_weight[p], swiglu_limit)              (bf16 [inter])
//   out[p] = EXL3(h[p], w2[e])                                            (bf16 [dim])
// where EXL3 is the oracle's exl3_linear_bf16<float> formula: u = H(x∘suh) per 128-block, v = u·Wq
// over the whole K in tile order, y = H(v)/128 ∘ svh. Each pair's arithmetic is its row's alone.
// x: float [rows, dim]; scratch: exl3_experts_scratch_floats(n_pairs, inter) floats (h, then the
// pairs' expert segments), 16-byte aligned; out: float [n_pairs, dim]. Three launches (segment
// table, gate/up, down); returns the last cudaGetLastError().
cudaError_t exl3_routed_experts(const float* x, const int32_t* pair_row, const int32_t* pair_expert,
                                const float* pair_weight, int64_t n_pairs, const Exl3ExpertsView& X,
                                float swiglu_limit, float* scratch, float* out, cudaStream_t s);
size_t exl3_experts_scratch_floats(int64_t n_pairs, int64_t inter);

}  // namespace dsv4::cuda
