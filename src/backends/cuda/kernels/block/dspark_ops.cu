// DSpark kernels (see dspark_ops.cuh).
#include <cmath>

#include "backends/cuda/kernels/block/dspark_ops.cuh"
#include "backends/cuda/kernels/block/fwd_reduce.cuh"
#include "core/bf16.h"
#include "core/fp8.h"
#include "core/quant.h"
#include "core/ue8m0.h"

namespace dsv4::cuda {

namespace {

constexpr int kThreads = 128;

// Rotates pair j of a tail: (a, b) * (cos + i sin) in float, -> bf16 (cpu::rope_apply<float>).
__device__ inline void rotate_pair(float* x, int j, float freq, int64_t pos, bool inverse) {
  const float angle = static_cast<float>(pos) * freq;
  const float c = cosf(angle), s0 = sinf(angle);
  const float sn = inverse ? -s0 : s0;
  const float a = x[2 * j], b = x[2 * j + 1];
  x[2 * j] = dsv4::round_bf16(a * c - b * sn);
  x[2 * j + 1] = dsv4::round_bf16(a * sn + b * c);
}

__global__ void pack_keys_kernel(const float* kn, const float* freqs, const int64_t* pos, int64_t row_begin, int64_t d,
                                 int rope_dim, int64_t cap, uint8_t* ring, float* qdq) {
  extern __shared__ float buf[];
  const int64_t r = row_begin + blockIdx.x;
  const int64_t p = pos[r];
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) buf[i] = kn[r * d + i];
  __syncthreads();
  for (int j = threadIdx.x; j < rope_dim / 2; j += blockDim.x) rotate_pair(buf + d - rope_dim, j, freqs[j], p, false);
  __syncthreads();
  const int64_t row_bytes = d + d / 32;
  uint8_t* out = ring ? ring + (p % cap) * row_bytes : nullptr;
  for (int64_t g = threadIdx.x; g < d / 32; g += blockDim.x) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(buf[g * 32 + i]));
    const uint8_t sbyte = dsv4::fp8_ue8m0_scale(amax);
    const float sc = dsv4::ue8m0_to_f32(sbyte), inv_s = 1.0f / sc;
    for (int i = 0; i < 32; ++i) {
      const uint8_t code = dsv4::fp8_ue8m0_code(buf[g * 32 + i], inv_s);
      if (out) out[g * 32 + i] = code;
      if (qdq) qdq[r * d + g * 32 + i] = dsv4::e4m3_to_f32(code) * sc;
    }
    if (out) out[d + g] = sbyte;
  }
}

__global__ void rope_tails_kernel(float* x, int heads, int64_t d, int rope_dim, const float* freqs, const int64_t* pos,
                                  bool inverse) {
  const int64_t rh = blockIdx.x;  // row * heads + head
  float* tail = x + rh * d + d - rope_dim;
  const int64_t p = pos[rh / heads];
  for (int j = threadIdx.x; j < rope_dim / 2; j += blockDim.x) rotate_pair(tail, j, freqs[j], p, inverse);
}

// One block per (stream, row, head); each thread owns dims i = tid + k * kThreads of the accumulator.
__global__ void attend_kernel(const float* q, const uint8_t* const* rings, const int64_t* slot_list,
                              const int32_t* slot_begin, int64_t row_bytes, const float* own_all, int B, int H,
                              int64_t d, float scale, const float* sink, float* o) {
  __shared__ float red[kThreads / 32];
  __shared__ float sc[64];
  const int64_t bh = blockIdx.x;  // (stream * B + row) * H + head
  const int64_t hh = bh % H, sn = bh / (static_cast<int64_t>(B) * H);
  const uint8_t* ring = rings[sn];
  const int64_t* slots = slot_list + slot_begin[sn];
  const int nring = slot_begin[sn + 1] - slot_begin[sn];
  const float* own = own_all + sn * B * d;
  const float* qv = q + bh * d;
  constexpr int kMaxPer = 8;  // d <= 1024
  float acc[kMaxPer];
  for (int k = 0; k < kMaxPer; ++k) acc[k] = 0.0f;
  const int n = nring + B;
  float m = -1e30f, sum = 0.0f;
  auto key_at = [&](int t, int64_t i) -> float {
    if (t < nring) {
      const uint8_t* row = ring + slots[t] * row_bytes;
      return dsv4::e4m3_to_f32(row[i]) * dsv4::ue8m0_to_f32(row[d + i / 32]);
    }
    return own[(t - nring) * d + i];
  };
  for (int b0 = 0; b0 < n; b0 += 64) {
    const int len = min(64, n - b0);
    float mb = m;
    for (int t = 0; t < len; ++t) {
      float part = 0.0f;
      for (int64_t i = threadIdx.x; i < d; i += kThreads) part += qv[i] * key_at(b0 + t, i);
      const float s = fwd_block_sum<kThreads>(part, red) * scale;
      if (threadIdx.x == 0) sc[t] = s;
      mb = fmaxf(mb, s);
    }
    __syncthreads();
    const float alpha = expf(m - mb);
    float psum = 0.0f;
    for (int k = 0; k < kMaxPer; ++k) acc[k] *= alpha;
    for (int t = 0; t < len; ++t) {
      const float p = expf(sc[t] - mb);
      psum += p;
      const float pb = dsv4::round_bf16(p);
      int k = 0;
      for (int64_t i = threadIdx.x; i < d; i += kThreads, ++k) acc[k] += pb * key_at(b0 + t, i);
    }
    sum = sum * alpha + psum;
    m = mb;
    __syncthreads();
  }
  sum += expf(sink[hh] - m);
  int k = 0;
  for (int64_t i = threadIdx.x; i < d; i += kThreads, ++k) o[bh * d + i] = dsv4::round_bf16(acc[k] / sum);
}

__global__ void wo_a_kernel(const float* o, const uint16_t* w, int G, int64_t O, int64_t gin, float* z) {
  __shared__ float red[kThreads / 32];
  const int64_t r = blockIdx.y, n = blockIdx.x;  // n in [0, G*O)
  const int64_t g = n / O;
  const float* x = o + r * G * gin + g * gin;
  const uint16_t* wr = w + n * gin;
  float part = 0.0f;
  for (int64_t i = threadIdx.x; i < gin; i += kThreads) part += x[i] * dsv4::bf16_to_f32(wr[i]);
  const float s = fwd_block_sum<kThreads>(part, red);
  if (threadIdx.x == 0) z[r * G * O + n] = dsv4::round_bf16(s);
}

// One block per row k.
__global__ void markov_embed_kernel(const uint16_t* table, const int32_t* tok, int64_t tok_stride, int64_t R, float* e) {
  const int64_t k = blockIdx.x;
  const int64_t t = tok[k * tok_stride];
  for (int64_t j = threadIdx.x; j < R; j += blockDim.x) e[k * R + j] = dsv4::bf16_to_f32(table[t * R + j]);
}

// One block per row k.
__global__ void markov_pick_kernel(float* li_all, int64_t li_stride, const float* bias_all, int64_t V, int32_t* tok_all,
                                   int64_t tok_stride, float* prob_all, int64_t prob_stride) {
  __shared__ float bv[256];
  __shared__ int64_t bi[256];
  __shared__ float red[256 / 32];
  const int64_t k = blockIdx.x;
  float* li = li_all + k * li_stride;
  const float* bias = bias_all + k * V;
  float best = -INFINITY;
  int64_t at = V;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    li[v] += bias[v];
    if (li[v] > best || at == V) { best = li[v]; at = v; }
  }
  block_argmax(best, at, bv, bi);
  const float mx = bv[0];
  float part = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) part += expf(li[v] - mx);
  const float z = fwd_block_sum<256>(part, red);
  if (threadIdx.x == 0) {
    tok_all[k * tok_stride] = static_cast<int32_t>(bi[0]);
    prob_all[k * prob_stride] = 1.0f / z;
  }
}

}  // namespace

cudaError_t dspark_pack_keys(const float* kn, const float* freqs, const int64_t* pos, int64_t row_begin, int64_t n,
                             int64_t d, int rope_dim, int64_t cap, uint8_t* ring, float* qdq, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (d % 32 != 0 || rope_dim > d) return cudaErrorInvalidValue;
  pack_keys_kernel<<<static_cast<unsigned>(n), kThreads, d * sizeof(float), s>>>(kn, freqs, pos, row_begin, d,
                                                                                 rope_dim, cap, ring, qdq);
  return cudaGetLastError();
}

cudaError_t rope_head_tails(float* x, int64_t rows, int heads, int64_t d, int rope_dim, const float* freqs,
                            const int64_t* pos, bool inverse, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  rope_tails_kernel<<<static_cast<unsigned>(rows * heads), 64, 0, s>>>(x, heads, d, rope_dim, freqs, pos, inverse);
  return cudaGetLastError();
}

cudaError_t dspark_attend(const float* q, const uint8_t* const* rings, const int64_t* slots, const int32_t* slot_begin,
                          int64_t row_bytes, const float* own, int N, int B, int H, int64_t d, float scale,
                          const float* sink, float* o, cudaStream_t s) {
  if (d > 8 * kThreads || d % 32 != 0) return cudaErrorInvalidValue;
  const int64_t blocks = static_cast<int64_t>(N) * B * H;
  if (blocks == 0) return cudaSuccess;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  attend_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(q, rings, slots, slot_begin, row_bytes, own, B, H, d,
                                                                  scale, sink, o);
  return cudaGetLastError();
}

cudaError_t grouped_wo_a(const float* o, const uint16_t* w, int64_t rows, int G, int64_t O, int64_t gin, float* z,
                         cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  wo_a_kernel<<<dim3(static_cast<unsigned>(G * O), static_cast<unsigned>(rows)), kThreads, 0, s>>>(o, w, G, O, gin, z);
  return cudaGetLastError();
}

cudaError_t markov_embed_rows(const uint16_t* table, const int32_t* tok, int64_t tok_stride, int64_t n, int64_t R,
                              float* e, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (n > 0x7fffffff) return cudaErrorInvalidValue;
  markov_embed_kernel<<<static_cast<unsigned>(n), 256, 0, s>>>(table, tok, tok_stride, R, e);
  return cudaGetLastError();
}

cudaError_t markov_pick(float* li, int64_t li_stride, const float* bias, int64_t V, int64_t n, int32_t* tok_out,
                        int64_t tok_stride, float* prob_out, int64_t prob_stride, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (n > 0x7fffffff) return cudaErrorInvalidValue;
  markov_pick_kernel<<<static_cast<unsigned>(n), 256, 0, s>>>(li, li_stride, bias, V, tok_out, tok_stride, prob_out,
                                                              prob_stride);
  return cudaGetLastError();
}

}  // namespace dsv4::cuda
