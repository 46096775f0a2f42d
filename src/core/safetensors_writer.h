// Safetensors writer: streams tensors (given or generated chunk by chunk) into files written atomically.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace dsv4 {

// Fills `out` with bytes [offset, offset + out.size()) of one tensor's payload. Called in increasing
// offset order, exactly covering the tensor, from the writing thread. See SafetensorsWriter for
// where chunk boundaries fall.
using TensorFill = std::function<Status(int64_t offset, std::span<uint8_t> out)>;

// Where a streamed file's bytes go: `write` appends bytes; `skip` moves past `n` bytes without
// writing them, leaving a file hole (no data blocks; reads return zeros). A null `skip` means the
// destination cannot hold holes: the emitter writes zeros instead.
struct ByteSink {
  std::function<Status(std::span<const uint8_t>)> write;
  std::function<Status(int64_t n)> skip;
};

struct SafetensorsWriteOptions {
  // The JSON header is padded with spaces so the data section starts at a multiple of this
  // (8 = the Rust writer's layout; 1 = no padding, EXL3's layout with possibly odd data offsets).
  int64_t header_alignment = 8;
  // Largest buffer used for a generated tensor: the memory bound of a streaming write.
  int64_t chunk_bytes = int64_t{8} << 20;
  // fsync the file before the rename and the directory after it.
  bool sync = true;
};

// Collects tensor descriptions, then writes them in the order added. Bytes of generated tensors
// are produced only while writing, one chunk at a time, so memory stays bounded by chunk_bytes
// whatever the tensor sizes. Chunk boundaries: with row = bytes of one slice along dim 0, chunks
// are whole rows when a row fits in chunk_bytes; otherwise whole innermost-dimension rows when one
// fits; otherwise whole elements.
class SafetensorsWriter {
 public:
  struct Item {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    int64_t nbytes = 0;
    std::vector<uint8_t> owned;          // add(): the bytes themselves
    std::span<const uint8_t> borrowed;   // add_borrowed(): caller-owned bytes
    TensorFill fill;                     // add_generated()
    bool hole = false;                   // add_hole(): no bytes; a file hole that reads as zeros
  };

  // Every add refuses (invalid_argument naming the tensor) an empty or reserved name, a duplicate
  // name, a negative dimension, an overflowing shape, or bytes whose size is not prod(shape)*size.
  Status add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  // `bytes` must stay valid until the last write()/serialize() call.
  Status add_borrowed(std::string name, DType dtype, std::vector<int64_t> shape,
                      std::span<const uint8_t> bytes);
  Status add_generated(std::string name, DType dtype, std::vector<int64_t> shape, TensorFill fill);
  // A tensor of zeros that write() leaves as a file hole: the file has its full logical size but no
  // blocks are allocated for it (sparse checkpoints for load tests; serialize() holds the zeros).
  Status add_hole(std::string name, DType dtype, std::vector<int64_t> shape);
  void set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

  const std::vector<Item>& tensors() const { return items_; }
  int64_t payload_bytes() const { return payload_bytes_; }
  // Payload bytes of add_hole() tensors (not written by write()).
  int64_t hole_bytes() const { return hole_bytes_; }
  bool contains(const std::string& name) const { return names_.count(name) != 0; }

  // The header JSON (tensors in the order added, offsets contiguous from 0), padded as configured.
  std::string header(const SafetensorsWriteOptions& options = {}) const;
  // Writes `path` atomically: a temporary file beside it, then rename. Errors name the path and,
  // for a failing fill, the tensor. On error the temporary file is removed and `path` untouched.
  Status write(const std::string& path, const SafetensorsWriteOptions& options = {}) const;
  // The whole file in memory (tests and small files).
  StatusOr<std::vector<uint8_t>> serialize(const SafetensorsWriteOptions& options = {}) const;
  // Streams the file's bytes to `sink` in order (used by write and serialize); hole tensors go to
  // sink.skip, or as zeros to sink.write when it has no skip.
  Status emit(const SafetensorsWriteOptions& options, const ByteSink& sink) const;
  Status emit(const SafetensorsWriteOptions& options,
              const std::function<Status(std::span<const uint8_t>)>& sink) const {
    return emit(options, ByteSink{sink, nullptr});
  }

 private:
  Status check_new(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                   int64_t* nbytes) const;
  // check_new, and `given` bytes must be the tensor's size.
  Status check_new_sized(const std::string& name, DType dtype, const std::vector<int64_t>& shape, size_t given,
                         int64_t* nbytes) const;

  std::vector<Item> items_;
  std::set<std::string> names_;
  std::map<std::string, std::string> metadata_;
  int64_t payload_bytes_ = 0;
  int64_t hole_bytes_ = 0;
};

// Writes `bytes` produced by `produce` (which calls its sink in order) to `path` atomically.
Status write_file_atomically(const std::string& path, bool sync,
                             const std::function<Status(const std::function<Status(std::span<const uint8_t>)>&)>& produce);
// The same with a sink that can skip: skipped ranges become holes (lseek past them; a trailing one
// by ftruncate), so the file has its full logical size without their data blocks.
Status write_sparse_file_atomically(const std::string& path, bool sync,
                                    const std::function<Status(const ByteSink&)>& produce);

// "model-00003-of-00048.safetensors" (1-based index).
std::string shard_file_name(int index, int count);

// Writes a sharded checkpoint: shard files, then model.safetensors.index.json with
// metadata.total_size (sum of payload bytes) and the weight_map. Only the shards being written
// need their descriptions in memory. write_shard may be called from several threads at once (each
// writes its own file; the names are checked and reserved under a lock).
class ShardedSafetensorsWriter {
 public:
  explicit ShardedSafetensorsWriter(std::string dir, SafetensorsWriteOptions options = {})
      : dir_(std::move(dir)), options_(options) {}

  // Writes `dir/file_name` now. Refuses a file name with a path separator, one not ending in
  // ".safetensors", one already written, and a tensor name already written to another shard.
  Status write_shard(const std::string& file_name, const SafetensorsWriter& shard);
  // Writes the index atomically; call once after the last shard.
  Status finish();

  int64_t total_size() const { return total_size_; }
  const std::map<std::string, std::string>& weight_map() const { return weight_map_; }

 private:
  // Checks `file_name` and the shard's tensor names and reserves them (under the lock).
  Status reserve(const std::string& file_name, const SafetensorsWriter& shard);
  void release(const std::string& file_name, const SafetensorsWriter& shard);

  std::mutex mu_;
  std::string dir_;
  SafetensorsWriteOptions options_;
  std::map<std::string, std::string> weight_map_;  // tensor name -> shard file name
  std::set<std::string> files_;
  int64_t total_size_ = 0;
};

}  // namespace dsv4
