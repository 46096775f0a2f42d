// sparse_attention: the V4.1 sparse attention entry point. Every row count runs the tensor-core
// kernel (attn_sparse_tc.cu), so that decode and prefill rows give the same bits; the CUDA-core
// kernels that follow the oracle's sequential fp32 order (two-pass for up to one 64-row chunk with
// selected entries, fused cluster kernel otherwise) stay selectable for comparison.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/kernels/attention/attn_sparse_rows.cuh"

namespace dsv4::cuda {

namespace {

// -1: not yet read from DSV4_ATTN_TC; else a SparseAttentionImpl value (atomic: the forward of
// several threads may ask first at once, each then writing the same value).
std::atomic<int> g_impl{-1};

// Two-pass kernels of the CUDA-core implementation: measured faster at one row than the fused
// kernel (whose serial per-block steps cost more than two waves of independent blocks).
bool use_two_pass(int64_t rows, int64_t n_sel) { return rows <= 64 && n_sel > 0; }

}  // namespace

SparseAttentionImpl sparse_attention_impl() {
  int v = g_impl.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("DSV4_ATTN_TC");
    v = static_cast<int>(e && std::strcmp(e, "0") == 0 ? SparseAttentionImpl::cuda_core : SparseAttentionImpl::tensor_core);
    g_impl.store(v, std::memory_order_relaxed);
  }
  return static_cast<SparseAttentionImpl>(v);
}

void set_sparse_attention_impl(SparseAttentionImpl impl) { g_impl.store(static_cast<int>(impl), std::memory_order_relaxed); }

// The CUDA-core requirement whatever the implementation (the tensor-core kernel takes none), so that
// scratch sized once serves both.
int64_t sparse_attention_work_floats(int64_t rows, int64_t H, int64_t W, int64_t n_sel) {
  return use_two_pass(rows, n_sel) ? sparse::two_pass_work_floats(rows, H, W, n_sel) : 0;
}

cudaError_t sparse_attention(const float* q, const float* kvn, const PieceDev* pieces, const int32_t* row_piece,
                             const int64_t* pos, int64_t rows, int64_t H, int64_t d, int64_t W, int64_t cap,
                             const int32_t* topk, int64_t n_sel, CompFormat fmt, const float* sink, float scale,
                             const float* freqs, int n_freq, int64_t G, float* o, float* work, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if ((d != 64 && d != 128 && d != 256 && d != 512) || H % 4 || H % G || W + n_sel == 0) return cudaErrorInvalidValue;
  const sparse::SparseArgs a{q, kvn, pieces, row_piece, pos, topk, sink, freqs, o, rows, H, d, W, cap, n_sel, G, scale, n_freq, fmt};
  if (sparse_attention_impl() == SparseAttentionImpl::tensor_core) return sparse::tensor_core(a, s);
  return use_two_pass(rows, n_sel) ? sparse::two_pass(a, work, s) : sparse::fused(a, s);
}

}  // namespace dsv4::cuda
