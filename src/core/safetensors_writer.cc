// Safetensors writing: header layout, chunked streaming of generated tensors, atomic file replace.
#include "core/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/tensor_view.h"

namespace dsv4 {
namespace {

using OrderedJson = nlohmann::ordered_json;
using Sink = std::function<Status(std::span<const uint8_t>)>;

bool valid_utf8_json_string(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

// Bytes per chunk of a generated tensor: the largest multiple of a natural unit (a dim-0 slice,
// else an innermost row, else one element) that fits in `budget`.
int64_t chunk_size(const SafetensorsWriter::Item& item, int64_t budget) {
  const int64_t elem = dtype_size(item.dtype);
  int64_t unit = elem;
  if (!item.shape.empty()) {
    int64_t slice = item.nbytes / std::max<int64_t>(item.shape[0], 1);
    int64_t row = item.shape.back() * elem;
    if (slice > 0 && slice <= budget) {
      unit = slice;
    } else if (row > 0 && row <= budget) {
      unit = row;
    }
  }
  return std::max<int64_t>(unit, budget / unit * unit);
}

Status write_all(int fd, std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), std::min<size_t>(bytes.size(), size_t{1} << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      return error(StatusCode::unavailable, "write failed: {}", std::strerror(errno));
    }
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
  return ok_status();
}

}  // namespace

Status SafetensorsWriter::check_new(const std::string& name, DType dtype,
                                    const std::vector<int64_t>& shape, int64_t* nbytes) const {
  if (name.empty()) return error(StatusCode::invalid_argument, "tensor name is empty");
  if (name == "__metadata__") {
    return error(StatusCode::invalid_argument, "tensor name '__metadata__' is reserved");
  }
  if (!valid_utf8_json_string(name)) {
    return error(StatusCode::invalid_argument, "tensor name '{}' is not valid UTF-8", name);
  }
  if (names_.count(name) != 0) {
    return error(StatusCode::invalid_argument, "tensor '{}': added twice", name);
  }
  for (int64_t d : shape) {
    if (d < 0) {
      return error(StatusCode::invalid_argument, "tensor '{}': negative dimension in shape {}", name,
                   shape_string(shape));
    }
  }
  auto n = checked_nbytes(dtype, shape);
  if (!n) {
    return error(StatusCode::invalid_argument, "tensor '{}': shape {} overflows 64 bits", name,
                 shape_string(shape));
  }
  *nbytes = *n;
  return ok_status();
}

Status SafetensorsWriter::check_new_sized(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                                          size_t given, int64_t* nbytes) const {
  DSV4_RETURN_IF_ERROR(check_new(name, dtype, shape, nbytes));
  if (static_cast<int64_t>(given) != *nbytes) {
    return error(StatusCode::invalid_argument, "tensor '{}': {} bytes given but {} {} needs {}", name, given,
                 dtype_name(dtype), shape_string(shape), *nbytes);
  }
  return ok_status();
}

Status SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape,
                              std::vector<uint8_t> bytes) {
  int64_t nbytes = 0;
  DSV4_RETURN_IF_ERROR(check_new_sized(name, dtype, shape, bytes.size(), &nbytes));
  names_.insert(name);
  payload_bytes_ += nbytes;
  items_.push_back(Item{std::move(name), dtype, std::move(shape), nbytes, std::move(bytes), {}, {}});
  return ok_status();
}

Status SafetensorsWriter::add_borrowed(std::string name, DType dtype, std::vector<int64_t> shape,
                                       std::span<const uint8_t> bytes) {
  int64_t nbytes = 0;
  DSV4_RETURN_IF_ERROR(check_new_sized(name, dtype, shape, bytes.size(), &nbytes));
  names_.insert(name);
  payload_bytes_ += nbytes;
  items_.push_back(Item{std::move(name), dtype, std::move(shape), nbytes, {}, bytes, {}});
  return ok_status();
}

Status SafetensorsWriter::add_hole(std::string name, DType dtype, std::vector<int64_t> shape) {
  int64_t nbytes = 0;
  DSV4_RETURN_IF_ERROR(check_new(name, dtype, shape, &nbytes));
  names_.insert(name);
  payload_bytes_ += nbytes;
  hole_bytes_ += nbytes;
  Item it{std::move(name), dtype, std::move(shape), nbytes, {}, {}, {}};
  it.hole = true;
  items_.push_back(std::move(it));
  return ok_status();
}

Status SafetensorsWriter::add_generated(std::string name, DType dtype, std::vector<int64_t> shape,
                                        TensorFill fill) {
  int64_t nbytes = 0;
  DSV4_RETURN_IF_ERROR(check_new(name, dtype, shape, &nbytes));
  if (!fill) return error(StatusCode::invalid_argument, "tensor '{}': no fill function", name);
  names_.insert(name);
  payload_bytes_ += nbytes;
  items_.push_back(Item{std::move(name), dtype, std::move(shape), nbytes, {}, {}, std::move(fill)});
  return ok_status();
}

std::string SafetensorsWriter::header(const SafetensorsWriteOptions& options) const {
  OrderedJson j = OrderedJson::object();
  if (!metadata_.empty()) {
    OrderedJson m = OrderedJson::object();
    for (const auto& [k, v] : metadata_) m[k] = v;
    j["__metadata__"] = std::move(m);
  }
  int64_t offset = 0;
  for (const Item& it : items_) {
    OrderedJson e = OrderedJson::object();
    e["dtype"] = std::string(dtype_name(it.dtype));
    e["shape"] = it.shape;
    e["data_offsets"] = {offset, offset + it.nbytes};
    j[it.name] = std::move(e);
    offset += it.nbytes;
  }
  std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const int64_t align = std::max<int64_t>(options.header_alignment, 1);
  while ((8 + static_cast<int64_t>(text.size())) % align != 0) text.push_back(' ');
  return text;
}

Status SafetensorsWriter::emit(const SafetensorsWriteOptions& options, const ByteSink& out) const {
  const Sink& sink = out.write;
  const std::string text = header(options);
  uint8_t len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));  // little-endian
  DSV4_RETURN_IF_ERROR(sink({len, 8}));
  DSV4_RETURN_IF_ERROR(sink({reinterpret_cast<const uint8_t*>(text.data()), text.size()}));
  std::vector<uint8_t> buffer;  // reused across generated tensors; at most chunk_bytes (or one unit)
  const int64_t budget = std::max<int64_t>(options.chunk_bytes, 1);
  for (const Item& it : items_) {
    if (it.hole && out.skip) {
      DSV4_RETURN_IF_ERROR(out.skip(it.nbytes));
    } else if (it.hole) {  // no holes at this destination: the zeros they read as
      for (int64_t off = 0; off < it.nbytes; off += budget) {
        const size_t len_now = static_cast<size_t>(std::min(budget, it.nbytes - off));
        buffer.assign(len_now, 0);
        DSV4_RETURN_IF_ERROR(sink({buffer.data(), len_now}));
      }
    } else if (it.fill) {
      const int64_t chunk = chunk_size(it, budget);
      for (int64_t off = 0; off < it.nbytes; off += chunk) {
        const int64_t len_now = std::min(chunk, it.nbytes - off);
        if (static_cast<int64_t>(buffer.size()) < len_now) buffer.resize(static_cast<size_t>(len_now));
        std::span<uint8_t> out(buffer.data(), static_cast<size_t>(len_now));
        Status s = it.fill(off, out);
        if (!s.ok()) return s.with_context(fmt::format("tensor '{}'", it.name));
        DSV4_RETURN_IF_ERROR(sink(out));
      }
    } else if (!it.owned.empty()) {
      DSV4_RETURN_IF_ERROR(sink(it.owned));
    } else if (!it.borrowed.empty()) {
      DSV4_RETURN_IF_ERROR(sink(it.borrowed));
    }
  }
  return ok_status();
}

StatusOr<std::vector<uint8_t>> SafetensorsWriter::serialize(const SafetensorsWriteOptions& options) const {
  std::vector<uint8_t> out;
  DSV4_RETURN_IF_ERROR(emit(options, [&](std::span<const uint8_t> b) {
    out.insert(out.end(), b.begin(), b.end());
    return ok_status();
  }));
  return out;
}

Status SafetensorsWriter::write(const std::string& path, const SafetensorsWriteOptions& options) const {
  return write_sparse_file_atomically(path, options.sync, [&](const ByteSink& sink) { return emit(options, sink); });
}

Status write_file_atomically(const std::string& path, bool sync,
                             const std::function<Status(const Sink&)>& produce) {
  return write_sparse_file_atomically(path, sync, [&](const ByteSink& sink) { return produce(sink.write); });
}

Status write_sparse_file_atomically(const std::string& path, bool sync,
                                    const std::function<Status(const ByteSink&)>& produce) {
  // The temporary name does not end in ".safetensors", so a directory scan never picks it up.
  const std::string tmp = fmt::format("{}.partial-{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return error(StatusCode::unavailable, "{}: cannot create temporary {}: {}", path, tmp,
                 std::strerror(errno));
  }
  // `end` is the logical size so far; a skip moves the file offset past a hole, and a hole at the end
  // of the file is materialised by ftruncate (lseek alone does not extend a file).
  int64_t end = 0;
  bool trailing_hole = false;
  ByteSink sink;
  sink.write = [&](std::span<const uint8_t> b) {
    end += static_cast<int64_t>(b.size());
    trailing_hole = false;
    return write_all(fd, b);
  };
  sink.skip = [&](int64_t n) {
    if (n <= 0) return ok_status();
    if (::lseek(fd, static_cast<off_t>(n), SEEK_CUR) < 0)
      return error(StatusCode::unavailable, "lseek failed: {}", std::strerror(errno));
    end += n;
    trailing_hole = true;
    return ok_status();
  };
  Status s = produce(sink);
  if (s.ok() && trailing_hole && ::ftruncate(fd, static_cast<off_t>(end)) != 0) {
    s = error(StatusCode::unavailable, "ftruncate to {} bytes failed: {}", end, std::strerror(errno));
  }
  if (s.ok() && sync && ::fsync(fd) != 0) {
    s = error(StatusCode::unavailable, "fsync failed: {}", std::strerror(errno));
  }
  if (::close(fd) != 0 && s.ok()) {
    s = error(StatusCode::unavailable, "close failed: {}", std::strerror(errno));
  }
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = error(StatusCode::unavailable, "rename from {} failed: {}", tmp, std::strerror(errno));
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s.with_context(path);
  }
  if (sync) {
    std::string dir = std::filesystem::path(path).parent_path().string();
    int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);  // best effort: makes the rename durable
      ::close(dfd);
    }
  }
  return ok_status();
}

std::string shard_file_name(int index, int count) {
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", index, count);
}

Status ShardedSafetensorsWriter::reserve(const std::string& file_name, const SafetensorsWriter& shard) {
  constexpr std::string_view kSuffix = ".safetensors";
  if (file_name.empty() || file_name.find('/') != std::string::npos || file_name == "." ||
      file_name == ".." || file_name.size() <= kSuffix.size() ||
      file_name.compare(file_name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    return error(StatusCode::invalid_argument, "shard file name '{}' is not a plain *.safetensors name",
                 file_name);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (files_.count(file_name) != 0) {
    return error(StatusCode::invalid_argument, "shard '{}' written twice", file_name);
  }
  for (const auto& it : shard.tensors()) {
    auto prev = weight_map_.find(it.name);
    if (prev != weight_map_.end()) {
      return error(StatusCode::invalid_argument, "{}: tensor '{}': already written to {}", file_name,
                   it.name, prev->second);
    }
  }
  files_.insert(file_name);
  for (const auto& it : shard.tensors()) weight_map_.emplace(it.name, file_name);
  return ok_status();
}

void ShardedSafetensorsWriter::release(const std::string& file_name, const SafetensorsWriter& shard) {
  std::lock_guard<std::mutex> lock(mu_);
  files_.erase(file_name);
  for (const auto& it : shard.tensors()) {
    auto at = weight_map_.find(it.name);
    if (at != weight_map_.end() && at->second == file_name) weight_map_.erase(at);
  }
}

Status ShardedSafetensorsWriter::write_shard(const std::string& file_name, const SafetensorsWriter& shard) {
  DSV4_RETURN_IF_ERROR(reserve(file_name, shard));
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  Status st = ec ? error(StatusCode::unavailable, "{}: cannot create directory: {}", dir_, ec.message())
                 : shard.write((std::filesystem::path(dir_) / file_name).string(), options_);
  if (!st.ok()) {
    release(file_name, shard);
    return st;
  }
  std::lock_guard<std::mutex> lock(mu_);
  total_size_ += shard.payload_bytes();
  return ok_status();
}

Status ShardedSafetensorsWriter::finish() {
  nlohmann::json j;  // std::map-backed: keys sorted, as Hugging Face writes weight_map
  j["metadata"] = {{"total_size", total_size_}};
  j["weight_map"] = nlohmann::json::object();
  for (const auto& [name, file] : weight_map_) j["weight_map"][name] = file;
  const std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  const std::string path = (std::filesystem::path(dir_) / "model.safetensors.index.json").string();
  return write_file_atomically(path, options_.sync, [&](const Sink& sink) {
    return sink({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  });
}

}  // namespace dsv4
