// GraphCache: capture on miss, replay on hit, eager fallback for keys that cannot be captured.
#include "backends/cuda/graph_cache.h"

#include "backends/cuda/check.h"

namespace dsv4::cuda {

GraphCache::~GraphCache() { clear(); }

void GraphCache::clear() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

void GraphCache::mark_uncapturable(const GraphKey& key) {
  uncapturable_.insert(key);
  if (auto it = graphs_.find(key); it != graphs_.end()) {
    cudaGraphExecDestroy(it->second);
    graphs_.erase(it);
  }
}

Status GraphCache::run(const GraphKey& key, cudaStream_t s, const Fn& fn) {
  const std::string what = fmt::format("graph (kind {}, bucket {})", key.kind, key.bucket);
  if (auto it = graphs_.find(key); it != graphs_.end()) {
    ++stats_.replays;
    return cuda_status(cudaGraphLaunch(it->second, s), "cudaGraphLaunch of " + what);
  }
  if (!uncapturable_.count(key)) {
    DSV4_RETURN_IF_ERROR(cuda_status(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
                                     "cudaStreamBeginCapture for " + what));
    const Status inside = fn(s);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    cudaGraphExec_t exec = nullptr;
    if (inside.ok() && end == cudaSuccess && graph &&
        cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
      cudaGraphDestroy(graph);
      graphs_.emplace(key, exec);
      ++stats_.captures;
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
