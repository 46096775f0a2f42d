// The CUDA backend's Collective over NCCL (see nccl_collective.h).
#include "fabric/nccl/nccl_collective.h"

namespace dsv4::fabric {

StatusOr<std::unique_ptr<NcclCollective>> NcclCollective::create(std::shared_ptr<NcclComm> comm, int64_t max_count) {
  if (!comm) return error(StatusCode::invalid_argument, "NCCL collective: no communicator");
  if (max_count < 1) return error(StatusCode::invalid_argument, "NCCL collective: max_count {} < 1", max_count);
  const size_t bytes = static_cast<size_t>(max_count) * comm->world() * sizeof(float);
  std::unique_ptr<NcclCollective> c(new NcclCollective(std::move(comm), max_count));
  const cudaError_t e = cudaMalloc(&c->scratch_, bytes);
  if (e != cudaSuccess)
    return error(StatusCode::resource_exhausted, "NCCL collective: cannot allocate {} MiB of scratch: {}", bytes >> 20,
                 cudaGetErrorString(e));
  return c;
}

NcclCollective::~NcclCollective() {
  if (scratch_) cudaFree(scratch_);
}

Status NcclCollective::all_reduce_ordered(float* values, int64_t count, cudaStream_t stream) {
  if (count > max_count_)
    return error(StatusCode::invalid_argument, "NCCL collective: a sum of {} floats exceeds the scratch of {}", count,
                 max_count_);
  return comm_->ordered_all_reduce(values, count, scratch_, stream);
}

Status NcclCollective::all_gather(const float* mine, int64_t count, float* all, cudaStream_t stream) {
  if (comm_->aborted()) return Status(StatusCode::unavailable, "the NCCL communicator was aborted");
  const ncclResult_t r = ncclAllGather(mine, all, static_cast<size_t>(count), ncclFloat32, comm_->comm(), stream);
  if (r != ncclSuccess)
    return error(StatusCode::internal, "ncclAllGather of {} floats: {}", count, ncclGetErrorString(r));
  return ok_status();
}

}  // namespace dsv4::fabric
