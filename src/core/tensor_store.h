// TensorStore: named tensors as typed views, from a checkpoint's mapped files or from buffers held in
// memory. A model's weight views (family/deepseek_v41/weights.h) point into one; it must outlive them.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor_view.h"

namespace dsv4 {

class MappedFile;

// Where a tensor's bytes live on disk: the mapped file and the byte offset of the view's first byte.
struct FileSpan {
  const MappedFile* file = nullptr;
  int64_t offset = 0;
};

// Immutable once built: const methods may be called from several threads at once.
class TensorStore {
 public:
  virtual ~TensorStore() = default;
  // The checkpoint path (or the store's name) errors name.
  virtual const std::string& path() const = 0;
  virtual bool contains(std::string_view name) const = 0;
  // not_found naming the store and the tensor when absent.
  virtual StatusOr<TensorView> tensor(std::string_view name) const = 0;
  // All tensor names, sorted.
  virtual std::vector<std::string> names() const = 0;
  // The file holding byte `p` of one of this store's views and its offset there (readers that copy a view's
  // bytes in large reads rather than through the mapping); nullopt for bytes held in memory.
  virtual std::optional<FileSpan> locate(const void* p) const {
    (void)p;
    return std::nullopt;
  }
};

// Tensors whose bytes this object holds (synthetic weights, re-encoded linears, tests). Views stay valid
// as long as the store lives: a tensor's bytes never move once added.
class MemoryTensors final : public TensorStore {
 public:
  explicit MemoryTensors(std::string name = "memory") : name_(std::move(name)) {}
  MemoryTensors(const MemoryTensors&) = delete;
  MemoryTensors& operator=(const MemoryTensors&) = delete;

  // Adds a tensor of `shape` whose stored bytes are `bytes` (numel x dtype size; I8 holds one byte per
  // element). invalid_argument when the size does not match or the name is taken.
  Status add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);

  const std::string& path() const override { return name_; }
  bool contains(std::string_view name) const override { return tensors_.find(name) != tensors_.end(); }
  StatusOr<TensorView> tensor(std::string_view name) const override;
  std::vector<std::string> names() const override;
  int64_t total_bytes() const { return total_; }

 private:
  struct Entry {
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::string name_;
  std::map<std::string, Entry, std::less<>> tensors_;
  int64_t total_ = 0;
};

}  // namespace dsv4
