// Safetensors reader: validates one file's header completely, then serves zero-copy tensor views.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mmap.h"
#include "core/status.h"
#include "core/tensor_view.h"

namespace dsv4 {

// Limits of the format (formats.md §4; the Rust reference refuses larger headers).
inline constexpr int64_t kSafetensorsMaxHeaderBytes = 100'000'000;
// Deeper JSON nesting than any valid header needs (tensor entry -> shape array is depth 3).
inline constexpr int kSafetensorsMaxJsonDepth = 16;

// One tensor of a safetensors header, validated.
struct SafetensorsEntry {
  std::string name;
  // The dtype as stored. "F4" (4-bit, header shape = logical FP4 count) is normalised to
  // DType::i8 with the last dimension halved, the packed-pair layout of DeepSeek's FP4 experts.
  DType dtype = DType::u8;
  std::string file_dtype;        // the header's dtype string: "F8_E8M0", "U8", "F4", ...
  std::vector<int64_t> shape;    // stored shape (for "F4": packed, last dim / 2)
  int64_t begin = 0;             // data_offsets, relative to the start of the data section
  int64_t end = 0;
  int64_t nbytes() const { return end - begin; }
};

// A parsed and validated header. Invariants: entries are sorted by `begin`, cover the data section
// [0, data_size) exactly with no holes or overlaps, names are unique, and every byte count equals
// prod(shape) * dtype size.
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;  // "__metadata__", string -> string
  int64_t header_bytes = 0;                     // N, the JSON length field
  int64_t data_offset = 0;                      // 8 + N: file offset of the data section
  int64_t data_size = 0;                        // bytes after the header
};

// Parses and validates a whole safetensors file held in `file` (header and data section extent;
// the data bytes themselves are not read). `label` names the file in every error, e.g.
// "model-00003-of-00048.safetensors: tensor 'layers.0.attn.wkv.weight': ...". Never reads outside
// `file` whatever its contents.
StatusOr<SafetensorsHeader> parse_safetensors(std::string_view label, std::span<const uint8_t> file);

// One mapped safetensors file.
class SafetensorsFile {
 public:
  SafetensorsFile() = default;
  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;

  // Maps and validates `path`; errors name the path (and the tensor where known).
  static StatusOr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const SafetensorsHeader& header() const { return header_; }
  // In data-offset order.
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const MappedFile& mapping() const { return file_; }

  // nullptr when absent.
  const SafetensorsEntry* find(std::string_view name) const;
  // not_found naming the file and the tensor when absent.
  StatusOr<TensorView> tensor(std::string_view name) const;
  // The view of an entry of this file.
  TensorView view(const SafetensorsEntry& entry) const;

 private:
  MappedFile file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> by_name_;  // name -> index into entries()
};

}  // namespace dsv4
