// BPE loading and the priority-queue merge loop (rank, then leftmost position).
#include "tokenizer/bpe.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"

namespace dsv4 {
namespace {

using nlohmann::json;

Status model_error(std::string_view what) {
  return Status(StatusCode::invalid_argument, fmt::format("model: {}", what));
}

// Splits a merge entry into its two token strings (views into the JSON document).
StatusOr<std::pair<std::string_view, std::string_view>> parse_merge(const json& m, size_t index) {
  if (m.is_string()) {
    std::string_view s = m.get_ref<const std::string&>();
    size_t space = s.find(' ');
    if (space == std::string_view::npos || s.find(' ', space + 1) != std::string_view::npos)
      return model_error(fmt::format("merges[{}] \"{}\" is not two tokens separated by one space", index, s));
    return std::make_pair(s.substr(0, space), s.substr(space + 1));
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
    return std::make_pair(std::string_view(m[0].get_ref<const std::string&>()),
                          std::string_view(m[1].get_ref<const std::string&>()));
  return model_error(fmt::format("merges[{}] is neither \"a b\" nor [\"a\", \"b\"]", index));
}

}  // namespace

StatusOr<BpeModel> BpeModel::from_json(const json& j) {
  if (!j.is_object()) return model_error("expected an object");
  if (!j.contains("type") || j["type"] != "BPE")
    return Status(StatusCode::unimplemented, fmt::format("model type {} is not supported (only BPE)",
                                                         j.contains("type") ? j["type"].dump() : "(missing)"));
  auto non_null = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  if (j.value("byte_fallback", false)) return model_error("byte_fallback is not supported");
  if (non_null("dropout") && j["dropout"].is_number() && j["dropout"].get<double>() > 0.0)
    return model_error("dropout is not supported (it makes encoding random)");
  if (non_null("continuing_subword_prefix") && j["continuing_subword_prefix"] != "")
    return model_error("continuing_subword_prefix is not supported");
  if (non_null("end_of_word_suffix") && j["end_of_word_suffix"] != "")
    return model_error("end_of_word_suffix is not supported");

  BpeModel m;
  m.ignore_merges_ = j.value("ignore_merges", false);
  if (!j.contains("vocab") || !j["vocab"].is_object()) return model_error("missing \"vocab\" object");
  const json& vocab = j["vocab"];
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer())
      return model_error(fmt::format("vocab entry \"{}\" has a non-integer id", it.key()));
    int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= (int64_t{1} << 24))
      return model_error(fmt::format("vocab entry \"{}\" has id {} outside [0, 2^24)", it.key(), id));
    if (static_cast<size_t>(id) >= m.id_to_token_.size()) m.id_to_token_.resize(id + 1);
    if (!m.id_to_token_[id].empty())
      return model_error(fmt::format("vocab id {} is used by both \"{}\" and \"{}\"", id, m.id_to_token_[id], it.key()));
    if (it.key().empty()) return model_error(fmt::format("vocab id {} is the empty string", id));
    m.id_to_token_[id] = it.key();
  }
  // id_to_token_ no longer changes size: views into its strings stay valid.
  m.token_to_id_.reserve(vocab.size());
  for (size_t id = 0; id < m.id_to_token_.size(); ++id) {
    const std::string& tok = m.id_to_token_[id];
    if (tok.empty()) continue;
    m.token_to_id_.emplace(tok, static_cast<TokenId>(id));
    if (m.ignore_merges_)
      if (auto bytes = byte_level::decode(tok)) m.bytes_to_id_.emplace(std::move(*bytes), static_cast<TokenId>(id));
  }
  for (int b = 0; b < 256; ++b) {
    std::string sym = byte_level::encode(std::string(1, static_cast<char>(b)));
    auto it = m.token_to_id_.find(sym);
    if (it == m.token_to_id_.end())
      return model_error(fmt::format("vocab lacks the byte-level symbol \"{}\" for byte 0x{:02X}", sym, b));
    m.byte_ids_[b] = it->second;
  }

  if (!j.contains("merges") || !j["merges"].is_array()) return model_error("missing \"merges\" array");
  const json& merges = j["merges"];
  size_t capacity = 16;
  m.merge_shift_ = 60;
  while (capacity < 2 * merges.size()) capacity *= 2, --m.merge_shift_;
  m.merge_table_.assign(capacity, Slot{});
  m.merge_mask_ = capacity - 1;
  std::string joined;
  for (size_t i = 0; i < merges.size(); ++i) {
    DSV4_ASSIGN_OR_RETURN(auto pair, parse_merge(merges[i], i));
    auto a = m.token_to_id_.find(pair.first);
    auto b = m.token_to_id_.find(pair.second);
    if (a == m.token_to_id_.end() || b == m.token_to_id_.end())
      return model_error(fmt::format("merges[{}] names \"{}\" which is not in the vocab", i,
                                     a == m.token_to_id_.end() ? pair.first : pair.second));
    joined.assign(pair.first).append(pair.second);
    auto ab = m.token_to_id_.find(joined);
    if (ab == m.token_to_id_.end())
      return model_error(fmt::format("merges[{}]: the merged token \"{}\" is not in the vocab", i, joined));
    m.insert_merge(pair_key(a->second, b->second), Merge{static_cast<uint32_t>(i), ab->second});
  }
  return m;
}

namespace {
// Fibonacci hashing: the top bits of key * 2^64/phi spread the small, dense id pairs evenly.
inline uint64_t slot_of(uint64_t key, int shift) { return (key * 0x9E3779B97F4A7C15ull) >> shift; }
}  // namespace

std::optional<TokenId> BpeModel::find(std::string_view token) const {
  auto it = token_to_id_.find(token);
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::insert_merge(uint64_t key, Merge merge) {
  for (uint64_t i = slot_of(key, merge_shift_);; i = (i + 1) & merge_mask_) {
    Slot& s = merge_table_[i];
    if (s.key == kEmpty) {
      s = {key, merge};
      ++merge_count_;
      return;
    }
    if (s.key == key) {  // a repeated pair keeps its last rank, as `tokenizers` builds its map
      s.merge = merge;
      return;
    }
  }
}

const BpeModel::Merge* BpeModel::find_merge(TokenId a, TokenId b) const {
  const uint64_t key = pair_key(a, b);
  for (uint64_t i = slot_of(key, merge_shift_);; i = (i + 1) & merge_mask_) {
    const Slot& s = merge_table_[i];
    if (s.key == key) return &s.merge;
    if (s.key == kEmpty) return nullptr;
  }
}

void BpeModel::encode_word(std::string_view bytes, std::vector<TokenId>& out) const {
  if (bytes.empty()) return;
  if (bytes.size() == 1) {
    out.push_back(byte_ids_[static_cast<uint8_t>(bytes[0])]);
    return;
  }
  if (ignore_merges_) {
    auto it = bytes_to_id_.find(std::string(bytes));
    if (it != bytes_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  merge_all(bytes, out);
}

void BpeModel::merge_all(std::string_view bytes, std::vector<TokenId>& out) const {
  struct Symbol {
    TokenId id;
    int32_t prev, next;  // neighbours in the live list; -1 / n at the ends
    bool alive;
  };
  struct Candidate {
    uint32_t rank;
    int32_t pos;  // left symbol
    TokenId merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Symbol> sym;
  thread_local std::vector<Candidate> heap;  // min-heap on (rank, pos)
  const int32_t n = static_cast<int32_t>(bytes.size());
  sym.resize(n);
  for (int32_t i = 0; i < n; ++i) sym[i] = {byte_ids_[static_cast<uint8_t>(bytes[i])], i - 1, i + 1, true};

  heap.clear();
  auto push = [&](Candidate c) {
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  auto lookup = [&](TokenId a, TokenId b) { return find_merge(a, b); };
  for (int32_t i = 0; i + 1 < n; ++i)
    if (const Merge* m = lookup(sym[i].id, sym[i + 1].id)) push({m->rank, i, m->merged});

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next >= n) continue;
    Symbol& right = sym[left.next];
    // Stale entry: one side has changed since it was queued.
    const Merge* now = lookup(left.id, right.id);
    if (now == nullptr || now->merged != top.merged) continue;
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (right.next < n) sym[right.next].prev = top.pos;
    if (left.prev >= 0)
      if (const Merge* m = lookup(sym[left.prev].id, left.id)) push({m->rank, left.prev, m->merged});
    if (left.next < n)
      if (const Merge* m = lookup(left.id, sym[left.next].id)) push({m->rank, top.pos, m->merged});
  }
  for (int32_t i = 0; i < n; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace dsv4
