// DSpark kernels (model-spec.md §3.9): stage keys into the packed FP8 ring rows, RoPE on head
// tails, the stage's window attention with sinks over ring keys plus the block's own keys, the
// grouped wo_a, and the Markov head's per-row pick. Plain pointers and sizes. The attention and the Markov
// kernels take any number of streams' drafts per launch, each row's arithmetic the same whatever the count.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

// Rows [row_begin, row_begin + n) of kn bf16 [*, d] (kv_norm'ed keys): RoPE (plain frequencies)
// on the last rope_dim values at pos[row], FP8 / UE8M0-per-32 packing; the packed row goes to
// ring slot pos % cap (ring may be null), the dequantised values to qdq [*, d] (may be null).
cudaError_t dspark_pack_keys(const float* kn, const float* freqs, const int64_t* pos, int64_t row_begin, int64_t n,
                             int64_t d, int rope_dim, int64_t cap, uint8_t* ring, float* qdq, cudaStream_t s);

// In place on x [rows, heads, d]: RoPE (inverse: conjugate) of each head's last rope_dim values.
cudaError_t rope_head_tails(float* x, int64_t rows, int heads, int64_t d, int rope_dim, const float* freqs,
                            const int64_t* pos, bool inverse, cudaStream_t s);

// o bf16 [N, B, H, d]: each (stream n, row, head) query q [N, B, H, d] against stream n's key list [ring
// rings[n] at slots[slot_begin[n] .. slot_begin[n + 1]) (packed FP8 rows of row_bytes) ; its own keys
// own [n, B, d]] with the oracle's 64-key online softmax, the sink in the denominator. rings [N] and slot_begin
// [N + 1] are device arrays. One block per (stream, row, head), the same arithmetic for every N: a stream's
// outputs do not depend on which other streams share the launch.
cudaError_t dspark_attend(const float* q, const uint8_t* const* rings, const int64_t* slots, const int32_t* slot_begin,
                          int64_t row_bytes, const float* own, int N, int B, int H, int64_t d, float scale,
                          const float* sink, float* o, cudaStream_t s);

// z bf16 [rows, G*O]: group g of o [rows, G*gin] times wo_a rows [g*O, (g+1)*O) (bf16 [G*O, gin]).
cudaError_t grouped_wo_a(const float* o, const uint16_t* w, int64_t rows, int G, int64_t O, int64_t gin, float* z,
                         cudaStream_t s);

// e f32 [n, R]: row k = markov_embed[tok[k * tok_stride]] (bf16 [V, R]).
cudaError_t markov_embed_rows(const uint16_t* table, const int32_t* tok, int64_t tok_stride, int64_t n, int64_t R,
                              float* e, cudaStream_t s);

// For each of n rows k (one block each, the same arithmetic for every n): l = li + k * li_stride (f32 [V]) += bias
// + k * V; tok_out[k * tok_stride] = first argmax; prob_out[k * prob_stride] = 1 / sum exp(l - max).
cudaError_t markov_pick(float* li, int64_t li_stride, const float* bias, int64_t V, int64_t n, int32_t* tok_out,
                        int64_t tok_stride, float* prob_out, int64_t prob_stride, cudaStream_t s);

}  // namespace dsv4::cuda
