// Row pages of split snapshots: reference counts along entry paths, page files (write, read, index), split inserts
// and hits assembled from pages (see prompt_cache.h).
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cache/prompt_cache_node.h"

namespace dsv4::cache {
namespace fs = std::filesystem;
namespace {

constexpr char kPageMagic[8] = {'D', 'S', 'V', '4', 'P', 'R', '0', '2'};  // row page file format version 2 (u64 keys)
constexpr const char* kPageSuffix = ".pcr";

// Fixed part of a row page file; then model id and the payload (each table's rows for positions [first, rows)).
struct PageHeader {
  char magic[8];
  uint32_t snapshot_version;
  uint32_t model_id_size;
  uint64_t rows;          // the page's end position (its node's prefix length)
  uint64_t first;         // the page's first position (rows - page_tokens)
  uint64_t chain;         // the node's chained prefix digest
  uint64_t payload_size;
  uint64_t payload_hash;  // xxh3-64 of the payload
};
static_assert(sizeof(PageHeader) == 56);

}  // namespace

std::string PromptCache::page_path(const Node* node) const {
  return (fs::path(options_.disk_dir) / fmt::format("{:016x}-{}{}", node->chain, node->rows, kPageSuffix)).string();
}

int64_t PromptCache::page_bytes(int64_t first, int64_t end) const {
  int64_t bytes = 0;
  for (const RowTableShape& t : options_.row_tables) {
    bytes += (end / t.positions_per_row - first / t.positions_per_row) * t.row_bytes;
  }
  return bytes;
}

void PromptCache::hold_ram_pages(Node* node) {
  for (Node* n : path_to(node)) {
    if (n->ram_users++ != 0) continue;
    DSV4_CHECK(n->page_rows != nullptr);  // filled by the caller before the first user holds it
    const int64_t size = static_cast<int64_t>(n->page_rows->size());
    stats_.ram_bytes += size;
    stats_.ram_page_bytes += size;
    stats_.ram_pages++;
  }
}

void PromptCache::drop_ram_pages(Node* node) {
  for (Node* n : path_to(node)) {
    if (--n->ram_users != 0) continue;
    const int64_t size = static_cast<int64_t>(n->page_rows->size());
    stats_.ram_bytes -= size;
    stats_.ram_page_bytes -= size;
    stats_.ram_pages--;
    n->page_rows.reset();
  }
}

void PromptCache::drop_disk_pages(Node* node) {
  for (Node* n : path_to(node)) {
    if (--n->disk_users == 0) remove_page_file(n);
  }
}

void PromptCache::remove_page_file(Node* node) {
  if (node->page_file_size == 0) return;
  std::error_code ec;
  fs::remove(page_path(node), ec);
  stats_.disk_bytes -= node->page_file_size;
  stats_.disk_pages--;
  node->page_file_size = 0;
}

Status PromptCache::write_page(Node* node) {
  const Bytes& payload = *node->page_rows;
  PageHeader header;
  std::memcpy(header.magic, kPageMagic, sizeof(kPageMagic));
  header.snapshot_version = options_.snapshot_version;
  header.model_id_size = static_cast<uint32_t>(options_.model_id.size());
  header.rows = static_cast<uint64_t>(node->rows);
  header.first = static_cast<uint64_t>(node->rows - options_.page_tokens);
  header.chain = node->chain;
  header.payload_size = payload.size();
  header.payload_hash = XXH3_64bits(payload.data(), payload.size());
  const std::string path = page_path(node);
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&header), sizeof(header));
    out.write(options_.model_id.data(), static_cast<std::streamsize>(options_.model_id.size()));
    out.write(reinterpret_cast<const char*>(payload.data()), static_cast<std::streamsize>(payload.size()));
    if (!out) return error(StatusCode::data_loss, "prompt cache: cannot write {}", temp);
  }
  std::error_code ec;
  fs::rename(temp, path, ec);
  if (ec) return error(StatusCode::data_loss, "prompt cache: cannot rename {}: {}", temp, ec.message());
  node->page_file_size = static_cast<int64_t>(sizeof(header) + options_.model_id.size() + payload.size());
  stats_.disk_bytes += node->page_file_size;
  stats_.disk_pages++;
  return ok_status();
}

StatusOr<Bytes> PromptCache::read_page(const Node* node) const {
  const std::string path = page_path(node);
  std::ifstream in(path, std::ios::binary);
  if (node->page_file_size == 0 || !in) return error(StatusCode::data_loss, "prompt cache: row page {} is missing", path);
  PageHeader header;
  in.read(reinterpret_cast<char*>(&header), sizeof(header));
  std::string model(in && header.model_id_size <= 4096 ? header.model_id_size : 0, '\0');
  in.read(model.data(), static_cast<std::streamsize>(model.size()));
  const int64_t first = node->rows - options_.page_tokens;
  if (!in || std::memcmp(header.magic, kPageMagic, sizeof(kPageMagic)) != 0 || model != options_.model_id ||
      header.snapshot_version != options_.snapshot_version || header.rows != static_cast<uint64_t>(node->rows) ||
      header.first != static_cast<uint64_t>(first) || header.chain != node->chain ||
      header.payload_size != static_cast<uint64_t>(page_bytes(first, node->rows))) {
    return error(StatusCode::data_loss, "prompt cache: row page {} belongs to another prefix, model or format", path);
  }
  Bytes payload(static_cast<size_t>(header.payload_size));
  in.read(reinterpret_cast<char*>(payload.data()), static_cast<std::streamsize>(payload.size()));
  if (!in || in.peek() != std::ifstream::traits_type::eof() ||
      XXH3_64bits(payload.data(), payload.size()) != header.payload_hash) {
    return error(StatusCode::data_loss, "prompt cache: row page {} is damaged (size or checksum)", path);
  }
  return payload;
}

void PromptCache::index_pages() {
  // Page files of nodes some parked entry uses; the rest (and every page file without row tables) goes.
  std::unordered_map<uint64_t, Node*> used;  // by chain digest
  std::vector<Node*> stack = {root_.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n->disk_users > 0) used.emplace(n->chain, n);
    for (auto& [key, child] : n->children) stack.push_back(child.get());
  }
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& item : fs::directory_iterator(options_.disk_dir, ec)) {
    if (item.is_regular_file() && item.path().extension() == kPageSuffix) files.push_back(item.path());
  }
  for (const fs::path& path : files) {
    // Header only; the payload checksum is checked when a hit reads the page.
    std::ifstream in(path, std::ios::binary);
    PageHeader header{};
    in.read(reinterpret_cast<char*>(&header), sizeof(header));
    std::string model(in && header.model_id_size <= 4096 ? header.model_id_size : 0, '\0');
    in.read(model.data(), static_cast<std::streamsize>(model.size()));
    auto it = used.find(header.chain);
    Node* node = it == used.end() ? nullptr : it->second;
    const uint64_t size = sizeof(header) + model.size() + header.payload_size;
    const bool usable = node != nullptr && in && std::memcmp(header.magic, kPageMagic, sizeof(kPageMagic)) == 0 &&
                        model == options_.model_id && header.snapshot_version == options_.snapshot_version &&
                        header.rows == static_cast<uint64_t>(node->rows) &&
                        header.first == static_cast<uint64_t>(node->rows - options_.page_tokens) &&
                        header.payload_size == static_cast<uint64_t>(page_bytes(node->rows - options_.page_tokens,
                                                                                node->rows)) &&
                        node->page_file_size == 0 && fs::file_size(path, ec) == size && page_path(node) == path.string();
    if (!usable) {
      fs::remove(path, ec);
      continue;
    }
    node->page_file_size = static_cast<int64_t>(size);
    stats_.disk_bytes += node->page_file_size;
    stats_.disk_pages++;
  }
  // A parked entry missing one of its pages cannot be restored: discard it now.
  if (!split()) return;
  const std::vector<Node*> entries(disk_lru_.begin(), disk_lru_.end());
  for (Node* node : entries) {
    const std::vector<Node*> path = path_to(node);
    if (std::all_of(path.begin(), path.end(), [](const Node* n) { return n->page_file_size != 0; })) continue;
    remove_entry(node);
    prune(node);
    stats_.discarded++;
  }
}

std::optional<CacheHit> PromptCache::hit_of(Node* node) {
  CacheHit hit{node->rows, node->entry->bytes, {}, {}};
  if (split()) {
    hit.tables.resize(options_.row_tables.size());
    for (Node* n : path_to(node)) {
      const int64_t first = n->rows - options_.page_tokens;
      size_t at = 0;
      for (size_t t = 0; t < options_.row_tables.size(); ++t) {
        const RowTableShape& shape = options_.row_tables[t];
        const size_t size = static_cast<size_t>((n->rows / shape.positions_per_row - first / shape.positions_per_row) *
                                                shape.row_bytes);
        if (size != 0) hit.tables[t].push_back(std::span<const uint8_t>(n->page_rows->data() + at, size));
        at += size;
      }
      hit.pages.push_back(n->page_rows);
    }
  }
  return hit;
}

int64_t PromptCache::shared_rows(std::span<const Key> prefix) const {
  const size_t page = static_cast<size_t>(options_.page_tokens);
  const Node* node = root_.get();
  for (size_t at = 0; at + page <= prefix.size(); at += page) {
    std::span<const Key> tokens = prefix.subspan(at, page);
    auto it = node->children.find(hash_tokens(tokens));
    if (it == node->children.end() || !std::equal(tokens.begin(), tokens.end(), it->second->page.begin())) break;
    node = it->second.get();
    if (node->page_rows == nullptr) return node->rows - static_cast<int64_t>(page);
  }
  return node->rows;
}

Status PromptCache::insert_parts(std::span<const Key> prefix, Bytes bounded, int64_t from,
                                 const std::vector<Bytes>& rows) {
  const int64_t page = options_.page_tokens;
  const int64_t end = static_cast<int64_t>(prefix.size());
  if (!split()) return error(StatusCode::invalid_argument, "prompt cache: no row tables; whole snapshots use insert");
  if (end == 0 || end % page != 0 || from < 0 || from % page != 0 || from > end) {
    return error(StatusCode::invalid_argument,
                 "prompt cache: a split entry of {} tokens with rows from {} is off the {}-token page grid", end, from,
                 page);
  }
  if (rows.size() != options_.row_tables.size()) {
    return error(StatusCode::invalid_argument, "prompt cache: {} row tables given, {} expected", rows.size(),
                 options_.row_tables.size());
  }
  for (size_t t = 0; t < rows.size(); ++t) {
    const RowTableShape& shape = options_.row_tables[t];
    const int64_t want = (end / shape.positions_per_row - from / shape.positions_per_row) * shape.row_bytes;
    if (static_cast<int64_t>(rows[t].size()) != want) {
      return error(StatusCode::invalid_argument, "prompt cache: table {} has {} bytes of rows from {} to {}, not {}", t,
                   rows[t].size(), from, end, want);
    }
  }
  if (from > shared_rows(prefix)) {
    return error(StatusCode::invalid_argument, "prompt cache: rows before {} are not all held in RAM pages", from);
  }
  Node* node = make_path(prefix);
  if (node == nullptr) return ok_status();  // page-hash collision: not cached
  for (Node* n : path_to(node)) {
    if (n->page_rows != nullptr) continue;  // held already (rows before `from` always are)
    const int64_t first = n->rows - page;
    auto bytes = std::make_shared<Bytes>();
    bytes->reserve(static_cast<size_t>(page_bytes(first, n->rows)));
    for (size_t t = 0; t < rows.size(); ++t) {
      const RowTableShape& shape = options_.row_tables[t];
      const int64_t at = (first / shape.positions_per_row - from / shape.positions_per_row) * shape.row_bytes;
      const int64_t size = (n->rows / shape.positions_per_row - first / shape.positions_per_row) * shape.row_bytes;
      bytes->insert(bytes->end(), rows[t].begin() + at, rows[t].begin() + at + size);
    }
    n->page_rows = std::move(bytes);
  }
  hold_ram_pages(node);  // before dropping a replaced entry, so pages both use stay
  if (node->entry) remove_entry(node);
  add_ram_entry(node, std::move(bounded));
  return ok_status();
}

int32_t PromptCache::page_users(std::span<const Key> prefix) const {
  const Node* node = find_node(prefix);
  return node == nullptr ? 0 : node->ram_users + node->disk_users;
}

}  // namespace dsv4::cache
