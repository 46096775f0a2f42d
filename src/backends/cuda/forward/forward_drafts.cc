// The CUDA forward's drafts: every asking stream's DSpark block in one pass per group of streams, one
// synchronization for the call (dspark_device.h; forward.h).
#include <algorithm>
#include <mutex>

#include "backends/cuda/forward/attention_state.h"
#include "backends/cuda/forward/dspark_device.h"
#include "backends/cuda/forward/forward.h"
#include "backends/cuda/runtime/arena.h"
#include "backends/cuda/runtime/check.h"
#include "backends/cuda/tp/collective.h"

namespace dsv4::cuda {

StatusOr<engine::DraftResult> Forward::draft(int32_t stream, int32_t next) {
  const engine::DraftAsk ask{stream, next};
  DSV4_ASSIGN_OR_RETURN(std::vector<engine::DraftResult> r, draft_batch({&ask, 1}, true));
  return std::move(r[0]);
}

StatusOr<std::vector<engine::DraftResult>> Forward::draft_batch(std::span<const engine::DraftAsk> asks, bool logits) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!model_->dspark) return error(StatusCode::unimplemented, "the model has no DSpark weights");
  const family::ModelPlan& cfg = config();
  std::vector<DraftStream> all;
  for (const engine::DraftAsk& a : asks) {
    auto it = streams_.find(a.stream);
    if (it == streams_.end()) return error(StatusCode::not_found, "no stream {}", a.stream);
    if (it->second.caches->length() == 0) return error(StatusCode::invalid_argument, "stream {} is empty", a.stream);
    if (a.next < 0 || a.next >= cfg.vocab) return error(StatusCode::invalid_argument, "token {} out of range", a.next);
    all.push_back(DraftStream{it->second.caches.get(), a.next});
  }
  std::vector<engine::DraftResult> out;
  if (all.empty()) return out;
  // Groups as large as the free scratch and the call rows allow (every rank of a tensor-parallel forward computes the
  // same sizes, so all make the same launches and collectives); their sizes never change a row's bits.
  const int64_t n = static_cast<int64_t>(all.size()), B = cfg.dspark_block;
  const int64_t free_bytes = static_cast<int64_t>(scratch_->capacity() - scratch_->mark());
  const int32_t world = options_.collective ? options_.collective->world() : 1;
  const int64_t g =
      std::min({n, std::max<int64_t>(1, options_.max_call_rows / B), dspark_group_streams(cfg, free_bytes, world)});
  const size_t per_group = dspark_draft_host_bytes(cfg, g, logits);
  const int64_t groups = (n + g - 1) / g;
  DSV4_RETURN_IF_ERROR(draft_host_.reserve(per_group * static_cast<size_t>(groups)));
  auto* host = static_cast<uint8_t*>(draft_host_.data());
  OpCtx o{&cfg, stream_, scratch_.get()};
  o.collective = options_.collective.get();  // a rank drafts with its heads and experts, gathered as the forward
  Status st;
  for (int64_t k = 0; k < groups && st.ok(); ++k) {
    const size_t mark = scratch_->mark();
    const int64_t first = k * g, size = std::min(g, n - first);
    st = dspark_draft_enqueue(o, *model_, std::span<const DraftStream>(all).subspan(first, size), logits,
                              host + k * per_group);
    scratch_->reset(mark);  // the next group's launches follow this group's on the stream
  }
  // The one synchronization of the batch (also after a failed enqueue: the pinned tables stay in use until then).
  const Status sync = cuda_status(cudaStreamSynchronize(stream_), "synchronizing after the drafts");
  DSV4_RETURN_IF_ERROR(st);
  DSV4_RETURN_IF_ERROR(sync);
  for (int64_t k = 0; k < groups; ++k) {
    const int64_t size = std::min(g, n - k * g);
    dspark_draft_results(cfg, size, logits, host + k * per_group, &out);
  }
  return out;
}

}  // namespace dsv4::cuda
