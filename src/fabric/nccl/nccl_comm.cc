// NcclComm: bootstrap through the control channel, ordered reduction, bounded waits (see nccl_comm.h).
#include "fabric/nccl/nccl_comm.h"

#include <cstdlib>
#include <cstring>
#include <thread>

#include "fabric/bounded_wait.h"
#include "fabric/nccl/ordered_sum.cuh"

namespace dsv4::fabric {
namespace {

Status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return ok_status();
  return error(StatusCode::internal, "{}: {}", what, ncclGetErrorString(r));
}

Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ok_status();
  return error(StatusCode::internal, "{}: {}", what, cudaGetErrorString(e));
}

}  // namespace

StatusOr<std::unique_ptr<NcclComm>> NcclComm::create(Control& control, int device) {
  // Connect every peer at init: with runtime connection (NCCL's default) the first collective of each kind
  // blocks the host until its peers answer, and a wedged or dead peer would hold it there. NCCL reads its
  // environment once, at its first call, so this comes before any.
  setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  std::unique_ptr<NcclComm> c(new NcclComm());
  c->rank_ = control.rank();
  c->world_ = control.world();
  int version = 0;
  DSV4_RETURN_IF_ERROR(nccl_status(ncclGetVersion(&version), "ncclGetVersion"));
  // Agreement on the library first: mixed NCCL versions may pick different algorithms or wire formats.
  const std::string mine = std::to_string(version);
  DSV4_ASSIGN_OR_RETURN(auto versions, control.all_gather({reinterpret_cast<const uint8_t*>(mine.data()), mine.size()}));
  for (int32_t r = 0; r < control.world(); ++r) {
    const std::string theirs(versions[static_cast<size_t>(r)].begin(), versions[static_cast<size_t>(r)].end());
    if (theirs != mine) {
      const std::string why = fmt::format("NCCL versions differ: rank {} has {}, rank {} has {}", control.rank(), mine, r, theirs);
      if (control.rank() == 0) control.fail(kExitAgreement, why);
      return Status(StatusCode::invalid_argument, why);
    }
  }
  std::vector<uint8_t> id(sizeof(ncclUniqueId));
  if (control.rank() == 0) {
    ncclUniqueId u;
    DSV4_RETURN_IF_ERROR(nccl_status(ncclGetUniqueId(&u), "ncclGetUniqueId"));
    std::memcpy(id.data(), &u, sizeof(u));
  }
  DSV4_RETURN_IF_ERROR(control.broadcast(&id));
  if (id.size() != sizeof(ncclUniqueId)) return error(StatusCode::data_loss, "rank 0 sent a {}-byte NCCL id", id.size());
  ncclUniqueId u;
  std::memcpy(&u, id.data(), sizeof(u));
  DSV4_RETURN_IF_ERROR(cuda_status(cudaSetDevice(device), "cudaSetDevice"));
  std::shared_ptr<std::atomic<bool>> flag = c->abort_requested_;
  control.add_abort_hook([flag] { *flag = true; });
  DSV4_RETURN_IF_ERROR(nccl_status(ncclCommInitRank(&c->comm_, c->world_, u, c->rank_), "ncclCommInitRank"));
  const auto limit = control.options().connect_timeout;
  // Warm-up: each kind of collective once, bounded, while every rank is here (an all-gather and an
  // all-reduce: if NCCL_RUNTIME_CONNECT was set otherwise, this is where their connections are made).
  float* one = nullptr;
  cudaStream_t stream = nullptr;
  DSV4_RETURN_IF_ERROR(cuda_status(cudaMalloc(&one, sizeof(float) * (1 + c->world_)), "cudaMalloc"));
  DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamCreate(&stream), "cudaStreamCreate"));
  Status warm = c->ordered_all_reduce(one, 1, one + 1, stream);
  if (warm.ok()) warm = c->plain_all_reduce(one, 1, stream);
  if (warm.ok()) warm = c->wait(stream, limit);
  cudaStreamDestroy(stream);
  cudaFree(one);
  DSV4_RETURN_IF_ERROR(warm.with_context("NCCL warm-up collective"));
  return c;
}

NcclComm::~NcclComm() {
  if (comm_ == nullptr || aborted_) return;  // an aborted communicator is freed by its abort
  if (abort_requested_->load()) {
    (void)abort_now("destroyed after the fabric failed");
    return;
  }
  // Abort, not ncclCommDestroy: destroying waits on the peers' teardown, and at a clean stop rank 0 waits for its
  // followers to exit before it tears down, so a destroying follower and a waiting rank 0 would block each other.
  // Nothing is in flight after a clean stop; the abort frees the communicator without waiting on anyone.
  ncclCommAbort(comm_);
}

Status NcclComm::abort_now(std::string why) {
  if (!aborted_) {
    aborted_ = true;
    std::thread([comm = comm_, done = abort_finished_] {
      ncclCommAbort(comm);
      *done = true;
    }).detach();
  }
  return Status(StatusCode::unavailable, std::move(why));
}

Status NcclComm::ordered_all_reduce(float* values, int64_t count, float* scratch, cudaStream_t stream) {
  if (aborted_) return Status(StatusCode::unavailable, "the NCCL communicator was aborted");
  DSV4_RETURN_IF_ERROR(nccl_status(
      ncclAllGather(values, scratch, static_cast<size_t>(count), ncclFloat32, comm_, stream), "ncclAllGather"));
  return cuda_status(ordered_sum_f32(scratch, world_, count, values, stream), "ordered_sum_f32");
}

Status NcclComm::plain_all_reduce(float* values, int64_t count, cudaStream_t stream) {
  if (aborted_) return Status(StatusCode::unavailable, "the NCCL communicator was aborted");
  return nccl_status(ncclAllReduce(values, values, static_cast<size_t>(count), ncclFloat32, ncclSum, comm_, stream),
                     "ncclAllReduce");
}

Status NcclComm::wait(cudaStream_t stream, std::chrono::milliseconds limit) {
  const auto poll = [&]() -> Poll {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return {PollState::done, ""};
    if (q != cudaErrorNotReady) return {PollState::failed, fmt::format("the stream: {}", cudaGetErrorString(q))};
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress)
      return {PollState::failed, fmt::format("NCCL: {}", ncclGetErrorString(async))};
    return {};
  };
  Status s = wait_bounded(poll, *abort_requested_, limit, "a collective");
  return s.ok() ? s : abort_now(s.message() + ": communicator aborted");
}

}  // namespace dsv4::fabric
