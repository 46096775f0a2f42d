// GraphCache: the launches of a callable captured once per key as a CUDA graph and replayed on
// later calls; keys that cannot be captured run eagerly.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "core/status.h"

namespace dsv4::cuda {

// What a graph was captured for: a kind of call (caller-defined) and its row bucket.
struct GraphKey {
  int32_t kind = 0;
  int64_t bucket = 0;
  bool operator==(const GraphKey&) const = default;
};

struct GraphKeyHash {
  size_t operator()(const GraphKey& k) const {
    return std::hash<int64_t>()(k.bucket * 1000003 + k.kind);
  }
};

// Not thread-safe; one cache per stream of work. A replay repeats the captured launches with the
// captured arguments: every pointer and host-side value the callable passes must be a function of
// the key (per-call data travels through device memory the graph reads).
class GraphCache {
 public:
  using Fn = std::function<Status(cudaStream_t)>;  // enqueues work on the stream, never syncs it

  GraphCache() = default;
  ~GraphCache();
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // Replays key's graph on `s`; on a miss, captures fn's launches on `s` into a graph, instantiates
  // and launches it. When capture fails (fn synchronizes, allocates, or returns an error during
  // capture) the key is marked uncapturable and fn runs eagerly, now and on later calls; an error of
  // the eager run is returned as is. `s` must not be the legacy default stream.
  Status run(const GraphKey& key, cudaStream_t s, const Fn& fn);

  // Later run()s of `key` call fn eagerly (data-dependent host control flow, debugging).
  void mark_uncapturable(const GraphKey& key);
  bool capturable(const GraphKey& key) const { return !uncapturable_.count(key); }
  // Drops every graph (e.g. after buffers the graphs point into were reallocated).
  void clear();

  struct Stats {
    int64_t captures = 0, replays = 0, eager = 0, failed_captures = 0;
  };
  const Stats& stats() const { return stats_; }
  size_t size() const { return graphs_.size(); }

 private:
  std::unordered_map<GraphKey, cudaGraphExec_t, GraphKeyHash> graphs_;
  std::unordered_set<GraphKey, GraphKeyHash> uncapturable_;
  Stats stats_;
};

}  // namespace dsv4::cuda
