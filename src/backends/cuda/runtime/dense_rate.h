// The device's dense matrix rates as cuBLAS reaches them: the floors that prefill GEMMs are judged
// against (docs/perf.md, docs/bench.md).
#pragma once

namespace dsv4::cuda {

// Dense GEMM rates at n x n x n with fp32 accumulation, FLOP/s, each the median of 5 timed calls
// after one warm-up on a private stream; 0 when the library or the memory is unavailable.
// bf16: cublasGemmEx, bf16 in and out. fp8: cublasLtMatmul, e4m3 A and B (A transposed, the only
// FP8 layout cuBLASLt takes), bf16 out, unit scales.
double dense_bf16_rate(int n = 8192);
double dense_fp8_rate(int n = 8192);

}  // namespace dsv4::cuda
