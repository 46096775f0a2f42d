// Checkpoint: a set of mapped safetensors files (sharded with an index, or not) seen as one tensor table.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/safetensors.h"
#include "core/status.h"
#include "core/tensor_store.h"
#include "core/tensor_view.h"

namespace dsv4 {

inline constexpr std::string_view kSafetensorsIndexName = "model.safetensors.index.json";

struct CheckpointOptions {
  // A tensor that an indexed shard holds but the index does not name is an error unless this is
  // set; then it is loaded and listed in Checkpoint::unindexed().
  bool allow_unindexed = false;
};

// One tensor of a checkpoint: its view and where it lives.
struct CheckpointTensor {
  TensorView view;
  const SafetensorsEntry* entry = nullptr;
  const SafetensorsFile* file = nullptr;
};

// Immutable after open: const methods may be called from several threads at once.
class Checkpoint final : public TensorStore {
 public:
  // `path` is either one .safetensors file, or a directory holding model.safetensors.index.json
  // (its shards are opened and cross-checked against it; other *.safetensors files there, e.g.
  // an EXL3 pack's vision_*.safetensors, are added and named in notes()), or else any
  // *.safetensors files (e.g. a single model.safetensors). Every file's header is validated;
  // errors name the file and the tensor. Tensor names must be unique across files.
  static StatusOr<Checkpoint> open(const std::string& path, const CheckpointOptions& options = {});

  const std::string& path() const override { return path_; }
  // In load order: indexed shards sorted by file name, then the others sorted by file name.
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  bool has_index() const { return has_index_; }
  // metadata.total_size of the index, when present.
  std::optional<int64_t> index_total_size() const { return index_total_size_; }

  int64_t tensor_count() const { return static_cast<int64_t>(table_.size()); }
  bool contains(std::string_view name) const override { return table_.find(name) != table_.end(); }
  // not_found naming the checkpoint and the tensor when absent.
  StatusOr<CheckpointTensor> find(std::string_view name) const;
  StatusOr<TensorView> tensor(std::string_view name) const override;
  // Paging hint for one tensor's bytes (e.g. willneed before a load, dontneed after a device upload).
  Status advise(const CheckpointTensor& t, MapAdvice advice) const {
    return t.file->mapping().advise_bytes(t.view.data, t.view.nbytes, advice);
  }
  // All tensor names, sorted.
  std::vector<std::string> names() const override;
  // The shard holding byte `p` of one of this checkpoint's views, and its offset in that file.
  std::optional<FileSpan> locate(const void* p) const override;
  // Payload bytes per stored dtype, and their sum.
  std::map<DType, int64_t> bytes_by_dtype() const;
  int64_t total_bytes() const;

  // Tensors of indexed shards that the index does not name (only with allow_unindexed).
  const std::vector<std::string>& unindexed() const { return unindexed_; }
  // Non-fatal findings worth showing a user (extra files, an index total_size that differs from
  // the payload), one line each.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  struct Location {
    uint32_t file;
    uint32_t entry;
  };
  Status add_file(std::unique_ptr<SafetensorsFile> file);

  std::string path_;
  bool has_index_ = false;
  std::optional<int64_t> index_total_size_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, Location, Hash, std::equal_to<>> table_;
  std::vector<std::string> unindexed_;
  std::vector<std::string> notes_;
};

}  // namespace dsv4
