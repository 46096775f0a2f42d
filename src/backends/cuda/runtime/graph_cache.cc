// GraphCache: capture on miss, replay on hit, eager fallback for keys that cannot be captured.
#include "backends/cuda/runtime/graph_cache.h"

#include <algorithm>

#include "backends/cuda/runtime/check.h"

namespace dsv4::cuda {

GraphCache::~GraphCache() { clear(); }

void GraphCache::clear() {
  for (auto& [key, e] : graphs_) cudaGraphExecDestroy(e.exec);
  graphs_.clear();
}

void GraphCache::mark_uncapturable(const GraphKey& key) {
  uncapturable_.insert(key);
  sightings_.erase(key);
  if (auto it = graphs_.find(key); it != graphs_.end()) {
    cudaGraphExecDestroy(it->second.exec);
    graphs_.erase(it);
  }
}

void GraphCache::evict_beyond_capacity() {
  while (graphs_.size() > std::max<size_t>(options_.capacity, 1)) {
    auto oldest = graphs_.begin();
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it)
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    cudaGraphExecDestroy(oldest->second.exec);
    graphs_.erase(oldest);
    ++stats_.evictions;
  }
}

Status GraphCache::run(const GraphKey& key, cudaStream_t s, const Fn& fn) {
  const std::string what = fmt::format("graph (kind {}, bucket {})", key.kind, key.bucket);
  ++tick_;
  if (auto it = graphs_.find(key); it != graphs_.end()) {
    ++stats_.replays;
    it->second.last_use = tick_;
    return cuda_status(cudaGraphLaunch(it->second.exec, s), "cudaGraphLaunch of " + what);
  }
  bool capture = !uncapturable_.count(key);
  if (capture && options_.eager_before > 0) {
    int32_t& seen = sightings_[key];
    if (seen < options_.eager_before) {
      ++seen;
      capture = false;
    } else {
      sightings_.erase(key);
    }
  }
  if (capture) {
    DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
                                     "cudaStreamBeginCapture for " + what));
    const Status inside = fn(s);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    cudaGraphExec_t exec = nullptr;
    if (inside.ok() && end == cudaSuccess && graph &&
        cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
      cudaGraphDestroy(graph);
      graphs_.emplace(key, Entry{exec, tick_});
      ++stats_.captures;
      evict_beyond_capacity();
      return cuda_status(cudaGraphLaunch(exec, s), "cudaGraphLaunch of " + what);
    }
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();  // capture errors are not sticky; clear the last-error slot
    ++stats_.failed_captures;
    uncapturable_.insert(key);
  }
  ++stats_.eager;
  return fn(s);
}

}  // namespace dsv4::cuda
