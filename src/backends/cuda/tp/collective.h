// The collectives a tensor-parallel rank's forward calls, as an interface: the CUDA backend names
// the points (after wo_b, after the MoE, the head) and src/fabric/nccl implements them over NCCL, so
// dsv4_cuda never links NCCL. Every call is enqueued on the forward's stream and returns at once.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace dsv4::cuda {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t world() const = 0;
  // values f32 [count] <- v_0 + v_1 + ... + v_(world-1) in float, left to right in rank order:
  // every rank holds the same bits whatever order the data arrives in.
  virtual Status all_reduce_ordered(float* values, int64_t count, cudaStream_t stream) = 0;
  // all f32 [world, count] <- every rank's mine f32 [count], rank r's at all + r * count (copies).
  virtual Status all_gather(const float* mine, int64_t count, float* all, cudaStream_t stream) = 0;
};

}  // namespace dsv4::cuda
