// Staged reads: byte runs from mapped checkpoint files (read with pread, in file order) or from memory, carried
// through a bounded set of staging buffers to a sink (a device copy, or a test's counter). Host memory in use is
// the buffers', whatever the total; reading the next chunk overlaps the sink's work on the previous ones.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor_store.h"

namespace dsv4 {

// One run of bytes to carry: `bytes` bytes at `src` (memory), read from `file` at its offset when the run lies in
// a mapped file (TensorStore::locate), so the mapping's pages are never touched.
struct ReadJob {
  const void* src = nullptr;
  int64_t bytes = 0;
  std::optional<FileSpan> file;
  uint64_t tag = 0;  // the sink's: where the bytes go
};

// A staging buffer the sink owns (pinned host memory for a device copy).
struct StageBuffer {
  uint8_t* data = nullptr;
  int64_t capacity = 0;
};

class StageSink {
 public:
  virtual ~StageSink() = default;
  // Blocks until buffer `b` may be overwritten (the sink's last use of it is finished).
  virtual Status wait(int b) = 0;
  // Bytes [offset, offset + n) of job `job` are in buffer `b` (n <= its capacity); the sink starts using them
  // and returns (it may finish later: wait(b) comes before the buffer is filled again).
  virtual Status consume(int b, const ReadJob& job, int64_t offset, int64_t n) = 0;
  // Every chunk was consumed: finish all pending work.
  virtual Status finish() = 0;
};

struct StageProgress {
  int64_t bytes_done = 0, bytes_total = 0;
};

struct StageStats {
  int64_t file_bytes = 0;     // read from files with pread
  int64_t memory_bytes = 0;   // copied from memory
  std::map<std::string, int64_t> by_file;  // file path -> bytes read from it
  double seconds = 0;
};

struct StageOptions {
  int threads = 2;  // readers; buffers are dealt to them round-robin (at least one each)
  std::function<void(const StageProgress&)> progress;  // called from reader threads, serialized
  bool drop_cache = true;  // advise the kernel it may drop the page cache of ranges once read
};

// Reads one job's bytes straight into `dst` (pread in large pieces when it lies in a file, else memcpy).
Status read_job(const ReadJob& job, void* dst);

// Carries every job to `sink` in chunks of at most the smallest buffer capacity: file-backed jobs sorted by
// (file, offset), then the memory ones. The first error (a short read names the file and offset) stops every
// reader; the sink is finished either way.
StatusOr<StageStats> stage_reads(std::vector<ReadJob> jobs, std::span<const StageBuffer> buffers, StageSink& sink,
                                 const StageOptions& options = {});

}  // namespace dsv4
