// Read-only memory mapping of a whole file, with RAII and madvise hints.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"

namespace dsv4 {

// Access-pattern hints passed to madvise(2); they never change what a read returns.
enum class MapAdvice { normal, sequential, random, willneed, dontneed };

// A read-only, private mapping of one file. Movable, not copyable; unmaps on destruction.
// An empty file maps to data() == nullptr, size() == 0. The file must not shrink while mapped
// (the kernel would raise SIGBUS on access past the new end); checkpoints are immutable.
class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Maps `path`; not_found when it does not exist, invalid_argument when it is not a regular file.
  static StatusOr<MappedFile> open(const std::string& path);

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, static_cast<size_t>(size_)}; }

  // Hints the kernel about [offset, offset + length) of the file (clamped to the file, widened to
  // whole pages). A hint that the kernel refuses is reported but harmless to ignore.
  Status advise(int64_t offset, int64_t length, MapAdvice advice) const;
  // The same for a pointer range inside this mapping (e.g. a TensorView's bytes).
  Status advise_bytes(const void* ptr, int64_t length, MapAdvice advice) const;

 private:
  std::string path_;
  uint8_t* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace dsv4
