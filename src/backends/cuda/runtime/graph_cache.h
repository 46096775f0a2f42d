// GraphCache: the launches of a callable captured once per key as a CUDA graph and replayed on
// later calls; keys that cannot be captured run eagerly.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"

namespace dsv4::cuda {

// What a graph was captured for: a kind of call (caller-defined), its row bucket and any further
// host-side sizes its launches depend on (dims, compared exactly).
struct GraphKey {
  int32_t kind = 0;
  int64_t bucket = 0;
  std::vector<int64_t> dims;
  bool operator==(const GraphKey&) const = default;
};

struct GraphKeyHash {
  size_t operator()(const GraphKey& k) const {
    uint64_t h = static_cast<uint64_t>(k.bucket) * 1000003u + static_cast<uint64_t>(k.kind);
    for (int64_t d : k.dims) h = (h ^ static_cast<uint64_t>(d)) * 0x100000001b3ull;
    return std::hash<uint64_t>()(h);
  }
};

struct GraphCacheOptions {
  size_t capacity = 64;       // graphs kept; the least recently launched is dropped beyond it
  int32_t eager_before = 0;   // a key runs eagerly this many times before it is captured
};

// Not thread-safe; one cache per stream of work. A replay repeats the captured launches with the
// captured arguments: every pointer and host-side value the callable passes must be a function of
// the key (per-call data travels through device memory the graph reads). The callable may run
// more than once per call (a failed capture is followed by an eager run), so it must not depend
// on host state it changes itself.
class GraphCache {
 public:
  using Fn = std::function<Status(cudaStream_t)>;  // enqueues work on the stream, never syncs it

  explicit GraphCache(GraphCacheOptions options = {}) : options_(options) {}
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
    int64_t captures = 0, replays = 0, eager = 0, failed_captures = 0, evictions = 0;
  };
  const Stats& stats() const { return stats_; }
  size_t size() const { return graphs_.size(); }

 private:
  struct Entry {
    cudaGraphExec_t exec = nullptr;
    uint64_t last_use = 0;
  };
  void evict_beyond_capacity();

  GraphCacheOptions options_;
  std::unordered_map<GraphKey, Entry, GraphKeyHash> graphs_;
  std::unordered_set<GraphKey, GraphKeyHash> uncapturable_;
  std::unordered_map<GraphKey, int32_t, GraphKeyHash> sightings_;  // eager runs of keys not yet captured
  uint64_t tick_ = 0;
  Stats stats_;
};

}  // namespace dsv4::cuda
