// Safetensors header parsing and validation (formats.md §4), and the mapped-file wrapper.
#include "core/safetensors.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <optional>

#include "core/json_strict.h"

namespace dsv4 {
namespace {

using Json = nlohmann::json;

// Dtype strings of the safetensors format that dsv4 has no use for (tensor.rs 811–863).
constexpr std::array<std::string_view, 10> kUnsupportedDtypes = {
    "BOOL", "F6_E2M3", "F6_E3M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ",
    "U16",  "U32",     "C64",     "F64",         "U64"};

struct Parser {
  std::string_view label;

  Status file_error(std::string_view problem) const {
    return error(StatusCode::data_loss, "{}: {}", label, problem);
  }
  Status tensor_error(std::string_view tensor, std::string_view problem) const {
    return error(StatusCode::data_loss, "{}: tensor '{}': {}", label, tensor, problem);
  }

  // A JSON value that must be an integer in [0, INT64_MAX].
  std::optional<int64_t> non_negative(const Json& v) const {
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(u);
    }
    if (v.is_number_integer()) {
      int64_t i = v.get<int64_t>();
      if (i < 0) return std::nullopt;
      return i;
    }
    return std::nullopt;
  }

  Status parse_metadata(const Json& v, SafetensorsHeader& out) const {
    if (v.is_null()) return ok_status();
    if (!v.is_object()) return file_error("__metadata__ is not an object of strings");
    for (const auto& [k, s] : v.items()) {
      if (!s.is_string()) {
        return file_error(fmt::format("__metadata__ value of '{}' is not a string", k));
      }
      out.metadata.emplace(k, s.get<std::string>());
    }
    return ok_status();
  }

  Status parse_entry(const std::string& name, const Json& v, int64_t data_size,
                     SafetensorsEntry& e) const {
    e.name = name;
    if (!v.is_object()) return tensor_error(name, "entry is not an object");
    // dtype
    auto dt = v.find("dtype");
    if (dt == v.end()) return tensor_error(name, "missing 'dtype'");
    if (!dt->is_string()) return tensor_error(name, "'dtype' is not a string");
    e.file_dtype = dt->get<std::string>();
    const bool fp4 = e.file_dtype == "F4";
    if (fp4) {
      e.dtype = DType::i8;
    } else if (auto d = dtype_from_name(e.file_dtype)) {
      e.dtype = *d;
    } else if (std::find(kUnsupportedDtypes.begin(), kUnsupportedDtypes.end(), e.file_dtype) !=
               kUnsupportedDtypes.end()) {
      return error(StatusCode::unimplemented, "{}: tensor '{}': dtype '{}' is not supported", label,
                   name, e.file_dtype);
    } else {
      return tensor_error(name, fmt::format("unknown dtype '{}'", e.file_dtype));
    }
    // shape
    auto sh = v.find("shape");
    if (sh == v.end()) return tensor_error(name, "missing 'shape'");
    if (!sh->is_array()) return tensor_error(name, "'shape' is not an array");
    e.shape.reserve(sh->size());
    for (const Json& d : *sh) {
      if (d.is_number_integer() && !d.is_number_unsigned() && d.get<int64_t>() < 0) {
        return tensor_error(name, fmt::format("negative dimension {} in 'shape'", d.get<int64_t>()));
      }
      auto n = non_negative(d);
      if (!n) return tensor_error(name, fmt::format("'shape' entry {} is not an integer in [0, 2^63)", d.dump()));
      e.shape.push_back(*n);
    }
    auto numel = checked_numel(e.shape);
    if (!numel) {
      return tensor_error(name, fmt::format("shape {} overflows 64 bits", shape_string(e.shape)));
    }
    int64_t nbytes = 0;
    if (fp4) {
      // Logical FP4 shape: two values per byte, rows must pack into whole bytes.
      if (e.shape.empty() || e.shape.back() % 2 != 0) {
        return tensor_error(name, fmt::format("F4 shape {} needs an even last dimension",
                                              shape_string(e.shape)));
      }
      nbytes = *numel / 2;
      e.shape.back() /= 2;
    } else if (__builtin_mul_overflow(*numel, dtype_size(e.dtype), &nbytes)) {
      return tensor_error(name, fmt::format("shape {} overflows 64 bits", shape_string(e.shape)));
    }
    // data_offsets
    auto off = v.find("data_offsets");
    if (off == v.end()) return tensor_error(name, "missing 'data_offsets'");
    if (!off->is_array() || off->size() != 2) {
      return tensor_error(name, "'data_offsets' is not an array of two integers");
    }
    auto b = non_negative((*off)[0]);
    auto en = non_negative((*off)[1]);
    if (!b || !en) return tensor_error(name, fmt::format("'data_offsets' {} are not integers in [0, 2^63)", off->dump()));
    e.begin = *b;
    e.end = *en;
    if (e.end < e.begin) {
      return tensor_error(name, fmt::format("data_offsets [{}, {}] are reversed", e.begin, e.end));
    }
    if (e.end > data_size) {
      return error(StatusCode::out_of_range,
                   "{}: tensor '{}': data_offsets [{}, {}] run past the data section of {} bytes",
                   label, name, e.begin, e.end, data_size);
    }
    if (e.end - e.begin != nbytes) {
      return tensor_error(name, fmt::format("data_offsets [{}, {}] hold {} bytes but {} {} needs {}",
                                            e.begin, e.end, e.end - e.begin, e.file_dtype,
                                            shape_string(e.shape), nbytes));
    }
    return ok_status();
  }

  // The entries, sorted by offset, must tile [0, data_size) exactly.
  Status check_coverage(std::vector<SafetensorsEntry>& entries, int64_t data_size) const {
    std::sort(entries.begin(), entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    int64_t expected = 0;
    const SafetensorsEntry* prev = nullptr;
    for (const SafetensorsEntry& e : entries) {
      if (e.begin < expected) {
        return tensor_error(e.name, fmt::format("data_offsets [{}, {}] overlap tensor '{}' [{}, {}]",
                                                e.begin, e.end, prev->name, prev->begin, prev->end));
      }
      if (e.begin > expected) {
        return tensor_error(e.name, fmt::format("hole: data bytes [{}, {}) before it belong to no tensor",
                                                expected, e.begin));
      }
      expected = e.end;
      prev = &e;
    }
    if (expected != data_size) {
      return file_error(fmt::format("hole: data bytes [{}, {}) after the last tensor belong to no tensor",
                                    expected, data_size));
    }
    return ok_status();
  }

  StatusOr<SafetensorsHeader> parse(std::span<const uint8_t> file) const {
    const int64_t size = static_cast<int64_t>(file.size());
    if (size < 8) {
      return file_error(fmt::format("file is {} bytes, shorter than the 8-byte header length", size));
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | file[static_cast<size_t>(i)];  // little-endian
    if (n > static_cast<uint64_t>(kSafetensorsMaxHeaderBytes)) {
      return file_error(fmt::format("header length {} exceeds the limit of {} bytes", n,
                                    kSafetensorsMaxHeaderBytes));
    }
    if (static_cast<int64_t>(n) > size - 8) {
      return file_error(fmt::format("header length {} runs past the end of the file ({} bytes)", n, size));
    }
    SafetensorsHeader h;
    h.header_bytes = static_cast<int64_t>(n);
    h.data_offset = 8 + h.header_bytes;
    h.data_size = size - h.data_offset;
    const char* text = reinterpret_cast<const char*>(file.data()) + 8;
    if (n == 0 || text[0] != '{') return file_error("header does not start with '{'");
    DSV4_ASSIGN_OR_RETURN(Json j, parse_json_strict(fmt::format("{}: header", label),
                                                    std::string_view(text, n), kSafetensorsMaxJsonDepth));
    if (!j.is_object()) return file_error("header is not a JSON object");
    h.entries.reserve(j.size());
    for (const auto& [key, value] : j.items()) {
      if (key == "__metadata__") {
        DSV4_RETURN_IF_ERROR(parse_metadata(value, h));
        continue;
      }
      SafetensorsEntry e;
      DSV4_RETURN_IF_ERROR(parse_entry(key, value, h.data_size, e));
      h.entries.push_back(std::move(e));
    }
    DSV4_RETURN_IF_ERROR(check_coverage(h.entries, h.data_size));
    return h;
  }
};

}  // namespace

StatusOr<SafetensorsHeader> parse_safetensors(std::string_view label, std::span<const uint8_t> file) {
  return Parser{label}.parse(file);
}

StatusOr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  DSV4_ASSIGN_OR_RETURN(MappedFile m, MappedFile::open(path));
  DSV4_ASSIGN_OR_RETURN(SafetensorsHeader h, parse_safetensors(path, m.bytes()));
  SafetensorsFile f;
  f.file_ = std::move(m);
  f.header_ = std::move(h);
  for (size_t i = 0; i < f.header_.entries.size(); ++i) f.by_name_.emplace(f.header_.entries[i].name, i);
  return f;
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &header_.entries[it->second];
}

StatusOr<TensorView> SafetensorsFile::tensor(std::string_view name) const {
  const SafetensorsEntry* e = find(name);
  if (e == nullptr) return error(StatusCode::not_found, "{}: tensor '{}': not in this file", path(), name);
  return view(*e);
}

TensorView SafetensorsFile::view(const SafetensorsEntry& e) const {
  TensorView v;
  v.data = file_.data() + header_.data_offset + e.begin;
  v.dtype = e.dtype;
  v.shape = e.shape;
  v.nbytes = e.nbytes();
  return v;
}

}  // namespace dsv4
