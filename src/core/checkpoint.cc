// Checkpoint opening: index parsing, shard cross-checks, directory scans, the merged tensor table.
#include "core/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "core/json_strict.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

// Larger than any real index (V4.1's is 7.5 MB for 96,085 tensors).
constexpr int64_t kMaxIndexBytes = int64_t{1} << 30;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool plain_file_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

struct Index {
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  std::optional<int64_t> total_size;
};

StatusOr<Index> read_index(const std::string& path) {
  DSV4_ASSIGN_OR_RETURN(MappedFile m, MappedFile::open(path));
  if (m.size() > kMaxIndexBytes) {
    return error(StatusCode::data_loss, "{}: {} bytes is larger than any index", path, m.size());
  }
  std::string_view text(reinterpret_cast<const char*>(m.data()), static_cast<size_t>(m.size()));
  DSV4_ASSIGN_OR_RETURN(nlohmann::json j, parse_json_strict(path, text, 8));
  if (!j.is_object()) return error(StatusCode::data_loss, "{}: not a JSON object", path);
  Index index;
  auto md = j.find("metadata");
  if (md != j.end() && !md->is_null()) {
    if (!md->is_object()) return error(StatusCode::data_loss, "{}: 'metadata' is not an object", path);
    auto ts = md->find("total_size");
    if (ts != md->end()) {
      // Some writers store it as a float; an integral non-negative value is accepted either way.
      if (ts->is_number_unsigned()) {
        uint64_t u = ts->get<uint64_t>();
        if (u <= static_cast<uint64_t>(INT64_MAX)) index.total_size = static_cast<int64_t>(u);
      } else if (ts->is_number_float()) {
        double d = ts->get<double>();
        if (d >= 0 && d < 9.2e18 && d == static_cast<double>(static_cast<int64_t>(d))) {
          index.total_size = static_cast<int64_t>(d);
        }
      }
      if (!index.total_size) {
        return error(StatusCode::data_loss, "{}: metadata.total_size {} is not a byte count", path,
                     ts->dump());
      }
    }
  }
  auto wm = j.find("weight_map");
  if (wm == j.end()) return error(StatusCode::data_loss, "{}: missing 'weight_map'", path);
  if (!wm->is_object()) return error(StatusCode::data_loss, "{}: 'weight_map' is not an object", path);
  for (const auto& [name, file] : wm->items()) {
    if (!file.is_string()) {
      return error(StatusCode::data_loss, "{}: tensor '{}': weight_map value {} is not a file name",
                   path, name, file.dump());
    }
    const std::string& f = file.get_ref<const std::string&>();
    if (!plain_file_name(f)) {
      return error(StatusCode::data_loss, "{}: tensor '{}': shard '{}' is not a plain file name", path,
                   name, f);
    }
    index.weight_map.emplace(name, f);
  }
  return index;
}

}  // namespace

Status Checkpoint::add_file(std::unique_ptr<SafetensorsFile> file) {
  const uint32_t fi = static_cast<uint32_t>(files_.size());
  const auto& entries = file->entries();
  for (uint32_t ei = 0; ei < entries.size(); ++ei) {
    auto [it, inserted] = table_.emplace(entries[ei].name, Location{fi, ei});
    if (!inserted) {
      return error(StatusCode::data_loss, "{}: tensor '{}': also present in {}", file->path(),
                   entries[ei].name, files_[it->second.file]->path());
    }
  }
  files_.push_back(std::move(file));
  return ok_status();
}

StatusOr<Checkpoint> Checkpoint::open(const std::string& path, const CheckpointOptions& options) {
  Checkpoint ck;
  ck.path_ = path;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!fs::exists(path, ec)) return error(StatusCode::not_found, "{}: no such checkpoint", path);
    DSV4_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(path));
    DSV4_RETURN_IF_ERROR(ck.add_file(std::make_unique<SafetensorsFile>(std::move(f))));
    return ck;
  }
  const fs::path dir(path);
  // Every *.safetensors file of the directory, sorted.
  std::vector<std::string> present;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (ends_with(name, ".safetensors") && it->is_regular_file(ec)) present.push_back(name);
  }
  if (ec) return error(StatusCode::unavailable, "{}: cannot list directory: {}", path, ec.message());
  std::sort(present.begin(), present.end());

  const std::string index_path = (dir / kSafetensorsIndexName).string();
  std::set<std::string> indexed_files;
  if (fs::exists(index_path, ec)) {
    DSV4_ASSIGN_OR_RETURN(Index index, read_index(index_path));
    ck.has_index_ = true;
    ck.index_total_size_ = index.total_size;
    std::map<std::string, std::string> first_tensor;  // shard -> a tensor naming it, for messages
    for (const auto& [tensor, file] : index.weight_map) {
      indexed_files.insert(file);
      first_tensor.emplace(file, tensor);
    }
    for (const std::string& file : indexed_files) {
      const std::string shard_path = (dir / file).string();
      if (!fs::exists(shard_path, ec)) {
        return error(StatusCode::not_found, "{}: shard '{}' (holding tensor '{}' and others) is missing",
                     index_path, file, first_tensor[file]);
      }
      DSV4_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open(shard_path));
      for (const SafetensorsEntry& e : f.entries()) {
        auto it = index.weight_map.find(e.name);
        if (it == index.weight_map.end() || it->second != file) {
          if (!options.allow_unindexed) {
            return error(StatusCode::data_loss, "{}: tensor '{}': present in the shard but {} {}",
                         shard_path, e.name, kSafetensorsIndexName,
                         it == index.weight_map.end() ? std::string("does not name it")
                                                      : fmt::format("places it in {}", it->second));
          }
          ck.unindexed_.push_back(e.name);
        }
      }
      DSV4_RETURN_IF_ERROR(ck.add_file(std::make_unique<SafetensorsFile>(std::move(f))));
    }
    std::map<std::string, uint32_t> file_index;  // shard file name -> index into files_
    uint32_t next = 0;
    for (const std::string& file : indexed_files) file_index.emplace(file, next++);
    for (const auto& [tensor, file] : index.weight_map) {
      auto it = ck.table_.find(tensor);
      if (it == ck.table_.end() || it->second.file != file_index.at(file)) {
        return error(StatusCode::data_loss, "{}: tensor '{}': named by {} but absent from the shard",
                     (dir / file).string(), tensor, kSafetensorsIndexName);
      }
    }
  }
  for (const std::string& file : present) {
    if (indexed_files.count(file) != 0) continue;
    DSV4_ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::open((dir / file).string()));
    if (ck.has_index_) {
      ck.notes_.push_back(fmt::format("{}: not named by {}; its {} tensors were added", file,
                                      kSafetensorsIndexName, f.entries().size()));
    }
    DSV4_RETURN_IF_ERROR(ck.add_file(std::make_unique<SafetensorsFile>(std::move(f))));
  }
  if (ck.files_.empty()) {
    return error(StatusCode::not_found, "{}: no {} and no *.safetensors files", path, kSafetensorsIndexName);
  }
  if (ck.index_total_size_) {
    int64_t indexed = 0;
    for (const auto& f : ck.files_) {
      if (indexed_files.count(fs::path(f->path()).filename().string()) == 0) continue;
      for (const SafetensorsEntry& e : f->entries()) indexed += e.nbytes();
    }
    if (indexed != *ck.index_total_size_) {
      ck.notes_.push_back(fmt::format("{}: metadata.total_size {} differs from the shards' payload of {} bytes",
                                      kSafetensorsIndexName, *ck.index_total_size_, indexed));
    }
  }
  return ck;
}

StatusOr<CheckpointTensor> Checkpoint::find(std::string_view name) const {
  auto it = table_.find(name);
  if (it == table_.end()) return error(StatusCode::not_found, "{}: tensor '{}': not in the checkpoint", path_, name);
  const SafetensorsFile& f = *files_[it->second.file];
  const SafetensorsEntry& e = f.entries()[it->second.entry];
  return CheckpointTensor{f.view(e), &e, &f};
}

StatusOr<TensorView> Checkpoint::tensor(std::string_view name) const {
  DSV4_ASSIGN_OR_RETURN(CheckpointTensor t, find(name));
  return std::move(t.view);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(table_.size());
  for (const auto& [name, loc] : table_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<FileSpan> Checkpoint::locate(const void* p) const {
  const auto* b = static_cast<const uint8_t*>(p);
  for (const auto& f : files_) {
    const MappedFile& m = f->mapping();
    if (m.data() && b >= m.data() && b < m.data() + m.size()) return FileSpan{&m, b - m.data()};
  }
  return std::nullopt;
}

std::map<DType, int64_t> Checkpoint::bytes_by_dtype() const {
  std::map<DType, int64_t> out;
  for (const auto& f : files_)
    for (const SafetensorsEntry& e : f->entries()) out[e.dtype] += e.nbytes();
  return out;
}

int64_t Checkpoint::total_bytes() const {
  int64_t n = 0;
  for (const auto& f : files_)
    for (const SafetensorsEntry& e : f->entries()) n += e.nbytes();
  return n;
}

}  // namespace dsv4
