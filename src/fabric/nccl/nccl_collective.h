// The CUDA backend's Collective (backends/cuda/tp/collective.h) over an NcclComm: the rank-ordered sum is
// NcclComm::ordered_all_reduce (ncclAllGather, then one kernel summing in rank order), the gather
// ncclAllGather. Owns the sum's scratch, f32 [world, max_count].
#pragma once

#include <cstdint>
#include <memory>

#include "backends/cuda/tp/collective.h"
#include "fabric/nccl/nccl_comm.h"

namespace dsv4::fabric {

class NcclCollective final : public cuda::Collective {
 public:
  // max_count: the most floats one all_reduce_ordered sums. The collective keeps comm alive.
  static StatusOr<std::unique_ptr<NcclCollective>> create(std::shared_ptr<NcclComm> comm, int64_t max_count);
  ~NcclCollective() override;
  int32_t rank() const override { return comm_->rank(); }
  int32_t world() const override { return comm_->world(); }
  Status all_reduce_ordered(float* values, int64_t count, cudaStream_t stream) override;
  Status all_gather(const float* mine, int64_t count, float* all, cudaStream_t stream) override;

 private:
  NcclCollective(std::shared_ptr<NcclComm> comm, int64_t max_count) : comm_(std::move(comm)), max_count_(max_count) {}
  std::shared_ptr<NcclComm> comm_;
  int64_t max_count_ = 0;
  float* scratch_ = nullptr;  // device f32 [world, max_count]
};

}  // namespace dsv4::fabric
