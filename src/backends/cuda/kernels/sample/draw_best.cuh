// Pieces shared by the row-draw kernels (row_draws.cu, truncated_draws.cu): the block shape, a row slice, the order
// of Gumbel scores (first of largest (score, x), lowest id on ties) and the device's score of one id.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lanes/sampling.h"

namespace dsv4::cuda::draw {

constexpr int kThreads = 256;
constexpr int64_t kSlice = 4096;  // ids per block (row_draw_slices)

struct Best {
  double score;
  double x;
  int64_t id;  // -1: none
};

// a before b: larger score, then larger x, then lower id (argmax rows carry x = 0); none last.
__device__ inline bool before(const Best& a, const Best& b) {
  if (a.id < 0) return false;
  if (b.id < 0) return true;
  if (a.score != b.score) return a.score > b.score;
  if (a.x != b.x) return a.x > b.x;
  return a.id < b.id;
}

// The block's first best (a selection: the same pick whatever the tree); every thread gets it. sh: shared [kThreads].
__device__ inline Best block_best(Best mine, Best* sh) {
  sh[threadIdx.x] = mine;
  __syncthreads();
  for (int o = kThreads / 2; o > 0; o >>= 1) {
    if (threadIdx.x < o && before(sh[threadIdx.x + o], sh[threadIdx.x])) sh[threadIdx.x] = sh[threadIdx.x + o];
    __syncthreads();
  }
  const Best b = sh[0];
  __syncthreads();
  return b;
}

// x and the device's Gumbel score of id i: sample_keyed's x = logit / T (IEEE division, the host's bits) and
// gumbel_score's expression with CUDA's log.
__device__ inline double device_score(float logit, double temperature, uint64_t key, int64_t i, double* x) {
  *x = static_cast<double>(logit) / temperature;
  const uint64_t bits = lanes::token_key(key, static_cast<lanes::TokenId>(i));
  return *x - log(-log(lanes::key_uniform(bits)));
}

// Whether a row's token mask (its words, or null: none) allows id i.
__device__ inline bool allowed(const uint64_t* words, int64_t i) {
  return words == nullptr || ((words[i >> 6] >> (i & 63)) & 1u) != 0;
}

}  // namespace dsv4::cuda::draw
