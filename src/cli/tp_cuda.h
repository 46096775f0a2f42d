// `serve --tp N --backend cuda`: a rank's share of the model on its own GPU, joined to the others over NCCL.
#pragma once

#include <string>

#include "family/deepseek_v41/model.h"
#include "cli/backend_choice.h"
#include "core/status.h"
#include "fabric/control.h"

namespace dsv4::cli {

// Every rank calls this at the same point, after opening `model`: replaces it by this rank's
// slice (fabric/split_plan.h, rank_weights.h; expert_parallel experts), makes the NCCL communicator on GPU
// rank % (visible GPUs), and sets choice.collective / choice.device for make_stream_forward. Refused
// without NCCL in the build.
Status prepare_tensor_parallel_cuda(fabric::Control& control, std::shared_ptr<const family::Model>& model,
                                    BackendChoice& choice);

}  // namespace dsv4::cli
