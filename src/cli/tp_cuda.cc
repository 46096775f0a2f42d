// A rank's share of the model for `serve --tp N --backend cuda` (see tp_cuda.h).
#include "cli/tp_cuda.h"

#include <fmt/format.h>

#include "fabric/rank_weights.h"
#include "fabric/split_plan.h"
#include "family/deepseek_v41/config.h"
#include "family/deepseek_v41/tensors.h"

#ifdef DSV4_WITH_NCCL
#include <cuda_runtime.h>

#include "fabric/nccl/nccl_collective.h"
#include "fabric/nccl/nccl_comm.h"
#endif

namespace dsv4::cli {

namespace {
// Heads per block of the CUDA sparse attention (kScoreHeads, kAccHeads in backends/cuda/kernels/attention/attn_sparse.cu): a
// rank's head count must be a multiple of it.
constexpr int32_t kCudaAttentionHeadBlock = 4;
}  // namespace

Status prepare_tensor_parallel_cuda(fabric::Control& control, std::shared_ptr<const family::Model>& model,
                                    BackendChoice& choice) {
#ifdef DSV4_WITH_NCCL
  const int32_t rank = control.rank(), tp = control.world();
  const family::Config& fc = model->config;
  if (fc.num_attention_heads % (tp * kCudaAttentionHeadBlock) != 0)
    return error(StatusCode::invalid_argument,
                 "--tp {} --backend cuda: {} attention heads leave {} per rank; the CUDA sparse attention runs heads in "
                 "blocks of {}", tp, fc.num_attention_heads, fc.num_attention_heads / tp, kCudaAttentionHeadBlock);
  DSV4_ASSIGN_OR_RETURN(fabric::SplitPlan plan,
                        fabric::make_split_plan(fc, family::expected_tensors(fc), tp, fabric::ExpertSplit::expert_parallel));
  auto cut = fabric::rank_model(*model, plan, rank);
  if (!cut.ok()) return cut.status().with_context(fmt::format("rank {}", rank));
  model = std::move(*cut);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1)
    return error(StatusCode::unavailable, "rank {}: no CUDA device is visible", rank);
  const int device = rank % devices;
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<fabric::NcclComm> comm, fabric::NcclComm::create(control, device));
  const int64_t max_sum = model->config.hidden_size;  // the forward only gathers; a rank sum's scratch stays one row
  DSV4_ASSIGN_OR_RETURN(std::unique_ptr<fabric::NcclCollective> coll,
                        fabric::NcclCollective::create(std::shared_ptr<fabric::NcclComm>(std::move(comm)), max_sum));
  choice.collective = std::shared_ptr<cuda::Collective>(std::move(coll));
  choice.device = device;
  return ok_status();
#else
  (void)control, (void)model, (void)choice;
  return error(StatusCode::unimplemented, "--tp {} --backend cuda: this dsv4 was built without NCCL", control.world());
#endif
}

}  // namespace dsv4::cli
