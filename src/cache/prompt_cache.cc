// Prompt cache: the page trie, RAM LRU with a byte budget, the disk tier's entry files (park, index, restore).
// Row pages of split snapshots are in row_pages.cc.
#include "cache/prompt_cache_node.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unordered_map>

namespace dsv4::cache {
namespace fs = std::filesystem;
namespace {

constexpr char kMagic[8] = {'D', 'S', 'V', '4', 'P', 'C', '0', '2'};  // file format version 2 (u64 keys)
constexpr const char* kSuffix = ".pce";

// Fixed part of an entry file; then model id, keys (u64 [rows]) and the payload.
struct FileHeader {
  char magic[8];
  uint32_t snapshot_version;
  uint32_t model_id_size;
  uint64_t rows;
  uint64_t tokens_hash;   // xxh3-64 of the tokens' bytes
  uint64_t payload_size;
  uint64_t payload_hash;  // xxh3-64 of the payload
};
static_assert(sizeof(FileHeader) == 48);

}  // namespace

PromptCache::PromptCache(PromptCacheOptions options) : options_(std::move(options)), root_(std::make_unique<Node>()) {}
PromptCache::~PromptCache() = default;

StatusOr<std::unique_ptr<PromptCache>> PromptCache::open(PromptCacheOptions options) {
  if (options.page_tokens < 1) return error(StatusCode::invalid_argument, "page_tokens {} is below 1", options.page_tokens);
  if (options.ram_bytes < 0) return error(StatusCode::invalid_argument, "ram_bytes {} is negative", options.ram_bytes);
  for (const RowTableShape& t : options.row_tables) {
    if (t.positions_per_row < 1 || t.row_bytes < 1) {
      return error(StatusCode::invalid_argument, "row table of {} positions per row and {} bytes per row",
                   t.positions_per_row, t.row_bytes);
    }
  }
  std::unique_ptr<PromptCache> cache(new PromptCache(std::move(options)));
  if (!cache->options_.disk_dir.empty()) {
    std::error_code ec;
    fs::create_directories(cache->options_.disk_dir, ec);
    if (ec) {
      return error(StatusCode::invalid_argument, "prompt cache directory {}: {}", cache->options_.disk_dir,
                   ec.message());
    }
    DSV4_RETURN_IF_ERROR(cache->index_disk());
  }
  return cache;
}

PromptCache::Node* PromptCache::find_node(std::span<const Key> prefix) const {
  const size_t page = static_cast<size_t>(options_.page_tokens);
  if (prefix.empty() || prefix.size() % page != 0) return nullptr;
  Node* node = root_.get();
  for (size_t at = 0; at < prefix.size(); at += page) {
    std::span<const Key> tokens = prefix.subspan(at, page);
    auto it = node->children.find(hash_tokens(tokens));
    if (it == node->children.end() || !std::equal(tokens.begin(), tokens.end(), it->second->page.begin())) {
      return nullptr;
    }
    node = it->second.get();
  }
  return node;
}

PromptCache::Node* PromptCache::make_path(std::span<const Key> prefix) {
  const size_t page = static_cast<size_t>(options_.page_tokens);
  Node* node = root_.get();
  for (size_t at = 0; at < prefix.size(); at += page) {
    std::span<const Key> tokens = prefix.subspan(at, page);
    const uint64_t key = hash_tokens(tokens);
    auto it = node->children.find(key);
    if (it == node->children.end()) {
      auto child = std::make_unique<Node>();
      child->parent = node;
      child->key = key;
      child->page.assign(tokens.begin(), tokens.end());
      child->rows = node->rows + static_cast<int64_t>(page);
      child->chain = XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), node->chain);
      it = node->children.emplace(key, std::move(child)).first;
    } else if (!std::equal(tokens.begin(), tokens.end(), it->second->page.begin())) {
      return nullptr;  // a 64-bit page-hash collision: leave the other prefix alone
    }
    node = it->second.get();
  }
  return node;
}

void PromptCache::prune(Node* node) {
  while (node != root_.get() && !node->entry && node->children.empty()) {
    Node* parent = node->parent;
    parent->children.erase(node->key);
    node = parent;
  }
}

std::vector<Key> PromptCache::node_tokens(const Node* node) const {
  std::vector<const Node*> path;
  for (const Node* n = node; n != root_.get(); n = n->parent) path.push_back(n);
  std::vector<Key> tokens;
  tokens.reserve(static_cast<size_t>(node->rows));
  for (auto it = path.rbegin(); it != path.rend(); ++it) tokens.insert(tokens.end(), (*it)->page.begin(), (*it)->page.end());
  return tokens;
}

std::string PromptCache::file_path(const Node* node) const {
  const std::vector<Key> tokens = node_tokens(node);
  return (fs::path(options_.disk_dir) / fmt::format("{:016x}-{}{}", hash_tokens(tokens), node->rows, kSuffix)).string();
}

void PromptCache::remove_entry(Node* node) {
  Entry& e = *node->entry;
  if (e.on_disk) {
    std::error_code ec;
    fs::remove(file_path(node), ec);
    disk_lru_.erase(e.lru);
    stats_.disk_bytes -= e.size;
    stats_.disk_entries--;
    if (split()) drop_disk_pages(node);
  } else {
    ram_lru_.erase(e.lru);
    stats_.ram_bytes -= e.size;
    stats_.ram_entries--;
    if (split()) drop_ram_pages(node);
  }
  node->entry.reset();
}

void PromptCache::touch(Node* node) {
  Entry& e = *node->entry;
  std::list<Node*>& lru = e.on_disk ? disk_lru_ : ram_lru_;
  lru.splice(lru.end(), lru, e.lru);
}

Status PromptCache::park(Node* node) {
  Entry& e = *node->entry;
  // Row pages first: every page on the path gets a file unless it has one, so the parked entry is complete.
  std::vector<Node*> written;
  auto undo = [&] {
    for (Node* w : written) {
      if (w->disk_users == 0) remove_page_file(w);
    }
  };
  if (split()) {
    for (Node* n : path_to(node)) {
      if (n->page_file_size != 0) continue;
      Status st = write_page(n);
      if (!st.ok()) {
        undo();
        return st;
      }
      written.push_back(n);
    }
  }
  const std::vector<Key> tokens = node_tokens(node);
  FileHeader header;
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.snapshot_version = options_.snapshot_version;
  header.model_id_size = static_cast<uint32_t>(options_.model_id.size());
  header.rows = static_cast<uint64_t>(node->rows);
  header.tokens_hash = hash_tokens(tokens);
  header.payload_size = e.bytes->size();
  header.payload_hash = XXH3_64bits(e.bytes->data(), e.bytes->size());
  const std::string path = file_path(node);
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&header), sizeof(header));
    out.write(options_.model_id.data(), static_cast<std::streamsize>(options_.model_id.size()));
    out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * sizeof(Key)));
    out.write(reinterpret_cast<const char*>(e.bytes->data()), static_cast<std::streamsize>(e.bytes->size()));
    if (!out) {
      undo();
      return error(StatusCode::data_loss, "prompt cache: cannot write {}", temp);
    }
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) {
    undo();
    return error(StatusCode::data_loss, "prompt cache: cannot rename {}: {}", temp, ec.message());
  }
  const int64_t file_bytes = static_cast<int64_t>(sizeof(header) + options_.model_id.size() +
                                                  tokens.size() * sizeof(Key) + e.bytes->size());
  ram_lru_.erase(e.lru);
  stats_.ram_bytes -= e.size;
  stats_.ram_entries--;
  e.on_disk = true;
  e.bytes.reset();
  e.size = file_bytes;
  e.lru = disk_lru_.insert(disk_lru_.end(), node);
  stats_.disk_bytes += file_bytes;
  stats_.disk_entries++;
  stats_.parked++;
  if (split()) {
    for (Node* n : path_to(node)) n->disk_users++;
    drop_ram_pages(node);
  }
  return ok_status();
}

StatusOr<Bytes> PromptCache::read_parked(Node* node, std::span<const Key> prefix) {
  const std::string path = file_path(node);
  std::ifstream in(path, std::ios::binary);
  if (!in) return error(StatusCode::data_loss, "prompt cache: cannot open {}", path);
  FileHeader header;
  in.read(reinterpret_cast<char*>(&header), sizeof(header));
  if (!in || std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0) {
    return error(StatusCode::data_loss, "prompt cache: {} is not a version-2 entry", path);
  }
  std::string model(header.model_id_size <= 4096 ? header.model_id_size : 0, '\0');
  in.read(model.data(), static_cast<std::streamsize>(model.size()));
  if (!in || model != options_.model_id || header.snapshot_version != options_.snapshot_version) {
    return error(StatusCode::data_loss, "prompt cache: {} belongs to model '{}' snapshot v{}, not '{}' v{}", path, model,
                 header.snapshot_version, options_.model_id, options_.snapshot_version);
  }
  std::vector<Key> tokens(static_cast<size_t>(std::min<uint64_t>(header.rows, prefix.size() + 1)));
  in.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * sizeof(Key)));
  if (!in || header.rows != prefix.size() || !std::equal(tokens.begin(), tokens.end(), prefix.begin()) ||
      hash_tokens(tokens) != header.tokens_hash) {
    return error(StatusCode::data_loss, "prompt cache: {} holds other tokens", path);
  }
  Bytes payload(static_cast<size_t>(std::min<uint64_t>(header.payload_size, uint64_t{1} << 40)));
  in.read(reinterpret_cast<char*>(payload.data()), static_cast<std::streamsize>(payload.size()));
  if (!in || payload.size() != header.payload_size || in.peek() != std::ifstream::traits_type::eof() ||
      XXH3_64bits(payload.data(), payload.size()) != header.payload_hash) {
    return error(StatusCode::data_loss, "prompt cache: {} is damaged (size or checksum)", path);
  }
  return payload;
}

Status PromptCache::index_disk() {
  struct Found {
    fs::file_time_type time;
    fs::path path;
  };
  std::vector<Found> files;
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(options_.disk_dir, ec)) {
    if (item.is_regular_file() && item.path().extension() == kSuffix) files.push_back({item.last_write_time(), item.path()});
  }
  if (ec) return error(StatusCode::invalid_argument, "prompt cache directory {}: {}", options_.disk_dir, ec.message());
  std::sort(files.begin(), files.end(), [](const Found& a, const Found& b) { return a.time < b.time; });
  for (const Found& f : files) {
    // Headers and tokens only; the payload checksum is checked when the entry is restored.
    std::ifstream in(f.path, std::ios::binary);
    FileHeader header{};
    in.read(reinterpret_cast<char*>(&header), sizeof(header));
    std::string model(in && header.model_id_size <= 4096 ? header.model_id_size : 0, '\0');
    in.read(model.data(), static_cast<std::streamsize>(model.size()));
    const bool usable = in && std::memcmp(header.magic, kMagic, sizeof(kMagic)) == 0 && model == options_.model_id &&
                        header.snapshot_version == options_.snapshot_version && header.rows > 0 &&
                        header.rows % static_cast<uint64_t>(options_.page_tokens) == 0 && header.rows < (1u << 26);
    std::vector<Key> tokens(usable ? header.rows : 0);
    in.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * sizeof(Key)));
    const uint64_t expected_size = sizeof(header) + header.model_id_size + header.rows * sizeof(Key) + header.payload_size;
    Node* node = nullptr;
    if (usable && in && hash_tokens(tokens) == header.tokens_hash && fs::file_size(f.path, ec) == expected_size) {
      node = make_path(tokens);
    }
    if (node == nullptr || node->entry || file_path(node) != f.path.string()) {
      fs::remove(f.path, ec);
      stats_.discarded++;
      if (node != nullptr) prune(node);
      continue;
    }
    node->entry = std::make_unique<Entry>();
    node->entry->on_disk = true;
    node->entry->size = static_cast<int64_t>(expected_size);
    node->entry->lru = disk_lru_.insert(disk_lru_.end(), node);
    stats_.disk_bytes += node->entry->size;
    stats_.disk_entries++;
    if (split()) {
      for (Node* n : path_to(node)) n->disk_users++;
    }
  }
  index_pages();
  apply_budgets();
  return ok_status();
}

void PromptCache::apply_budgets() {
  while (stats_.ram_bytes > options_.ram_bytes && !ram_lru_.empty()) {
    Node* node = ram_lru_.front();
    if (!options_.disk_dir.empty() && park(node).ok()) continue;
    remove_entry(node);
    prune(node);
    stats_.dropped++;
  }
  while (stats_.disk_bytes > options_.disk_bytes && !disk_lru_.empty()) {
    Node* node = disk_lru_.front();
    remove_entry(node);
    prune(node);
    stats_.dropped++;
  }
}

std::optional<CacheHit> PromptCache::lookup(std::span<const Key> tokens, int64_t max_rows) {
  stats_.lookups++;
  const size_t page = static_cast<size_t>(options_.page_tokens);
  const size_t limit = static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(max_rows, tokens.size())));
  std::vector<Node*> found;  // nodes with entries along the prompt's path, shallow to deep
  Node* node = root_.get();
  for (size_t at = 0; at + page <= limit; at += page) {
    std::span<const Key> chunk = tokens.subspan(at, page);
    auto it = node->children.find(hash_tokens(chunk));
    if (it == node->children.end() || !std::equal(chunk.begin(), chunk.end(), it->second->page.begin())) break;
    node = it->second.get();
    if (node->entry) found.push_back(node);
  }
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    Node* hit = *it;
    if (!hit->entry) continue;  // discarded above with a damaged page it shared
    if (hit->entry->on_disk) {
      StatusOr<Bytes> bytes = read_parked(hit, tokens.first(static_cast<size_t>(hit->rows)));
      // Row pages not in RAM are read back from their files, each checked.
      std::vector<std::pair<Node*, Bytes>> pages;
      if (bytes.ok() && split()) {
        for (Node* n : path_to(hit)) {
          if (n->page_rows != nullptr) continue;
          StatusOr<Bytes> rows = read_page(n);
          if (!rows.ok()) {
            remove_page_file(n);  // damaged: entries that need it are discarded when they are tried
            bytes = rows.status();
            break;
          }
          pages.emplace_back(n, std::move(rows).value());
        }
      }
      if (!bytes.ok()) {
        remove_entry(hit);
        prune(hit);
        stats_.discarded++;
        continue;
      }
      // Back to RAM: the file goes, the bytes (and pages) join the RAM tier as most recently used.
      for (auto& [n, rows] : pages) n->page_rows = std::make_shared<const Bytes>(std::move(rows));
      if (split()) hold_ram_pages(hit);
      remove_entry(hit);
      hit->entry = std::make_unique<Entry>();
      hit->entry->size = static_cast<int64_t>(bytes->size());
      hit->entry->bytes = std::make_shared<const Bytes>(std::move(bytes).value());
      hit->entry->lru = ram_lru_.insert(ram_lru_.end(), hit);
      stats_.ram_bytes += hit->entry->size;
      stats_.ram_entries++;
      stats_.restored++;
    } else {
      touch(hit);
    }
    std::optional<CacheHit> result = hit_of(hit);
    stats_.hits++;
    stats_.hit_rows += result->rows;
    apply_budgets();  // may park the restored entry again; `result` keeps its bytes and pages alive
    return result;
  }
  return std::nullopt;
}

bool PromptCache::contains(std::span<const Key> prefix) const {
  Node* node = find_node(prefix);
  return node != nullptr && node->entry != nullptr;
}

Status PromptCache::insert(std::span<const Key> prefix, Bytes bytes) {
  const size_t page = static_cast<size_t>(options_.page_tokens);
  if (prefix.empty() || prefix.size() % page != 0) {
    return error(StatusCode::invalid_argument, "prompt cache: a prefix of {} tokens is not a multiple of the {}-token page",
                 prefix.size(), page);
  }
  if (split()) return error(StatusCode::invalid_argument, "prompt cache: split snapshots go through insert_parts");
  Node* node = make_path(prefix);
  if (node == nullptr) return ok_status();  // page-hash collision: not cached
  if (node->entry) remove_entry(node);
  add_ram_entry(node, std::move(bytes));
  return ok_status();
}

void PromptCache::add_ram_entry(Node* node, Bytes bytes) {
  node->entry = std::make_unique<Entry>();
  node->entry->size = static_cast<int64_t>(bytes.size());
  node->entry->bytes = std::make_shared<const Bytes>(std::move(bytes));
  node->entry->lru = ram_lru_.insert(ram_lru_.end(), node);
  stats_.ram_bytes += node->entry->size;
  stats_.ram_entries++;
  stats_.inserts++;
  apply_budgets();
}

void PromptCache::discard(std::span<const Key> prefix) {
  Node* node = find_node(prefix);
  if (node == nullptr || !node->entry) return;
  remove_entry(node);
  prune(node);
  stats_.discarded++;
}

std::vector<int64_t> PromptCache::ram_lru_rows() const {
  std::vector<int64_t> rows;
  for (const Node* n : ram_lru_) rows.push_back(n->rows);
  return rows;
}

std::vector<int64_t> PromptCache::disk_lru_rows() const {
  std::vector<int64_t> rows;
  for (const Node* n : disk_lru_) rows.push_back(n->rows);
  return rows;
}

}  // namespace dsv4::cache
