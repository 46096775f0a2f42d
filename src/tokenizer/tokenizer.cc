// Tokenizer loading (tokenizer.json sections) and the encode/decode pipeline.
#include "tokenizer/tokenizer.h"

#include <deque>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer/word_cache.h"

namespace dsv4 {

using nlohmann::json;

struct Tokenizer::Impl {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel bpe;
  std::vector<AddedToken> added;
  std::vector<int32_t> added_index;  // by id: index into `added`, or -1
  std::unordered_map<std::string, TokenId> added_by_content;
  AddedTokenMatcher raw_matcher;         // normalized = false, matched on the raw text
  AddedTokenMatcher normalized_matcher;  // normalized = true, matched on normalized text
  std::vector<std::string> bytes;        // by id: the bytes the token decodes to
  std::vector<bool> present;             // by id: whether the id names a token

  uint64_t cache_owner = WordCache::new_owner();  // this tokenizer's key in the per-thread caches
  static constexpr size_t kWordCacheFrom = 16384;  // texts of at least this many bytes use the word cache

  void encode_plain(std::string_view text, std::vector<TokenId>& out) const;
};

namespace {

Status section_error(std::string_view section, std::string_view what) {
  return Status(StatusCode::invalid_argument, fmt::format("{}: {}", section, what));
}

StatusOr<std::vector<AddedToken>> parse_added_tokens(const json& j) {
  std::vector<AddedToken> out;
  if (j.is_null()) return out;
  if (!j.is_array()) return section_error("added_tokens", "expected an array");
  for (size_t i = 0; i < j.size(); ++i) {
    const json& e = j[i];
    auto where = fmt::format("added_tokens[{}]", i);
    if (!e.is_object()) return section_error(where, "expected an object");
    if (!e.contains("id") || !e["id"].is_number_integer()) return section_error(where, "missing integer \"id\"");
    if (!e.contains("content") || !e["content"].is_string()) return section_error(where, "missing string \"content\"");
    AddedToken t;
    int64_t id = e["id"].get<int64_t>();
    if (id < 0 || id >= (int64_t{1} << 24)) return section_error(where, fmt::format("id {} outside [0, 2^24)", id));
    t.id = static_cast<TokenId>(id);
    t.content = e["content"].get<std::string>();
    if (t.content.empty()) return section_error(where, "empty \"content\"");
    if (!utf8::is_valid(t.content)) return section_error(where, "\"content\" is not valid UTF-8");
    auto flag = [&](const char* key, bool& v) -> Status {
      if (!e.contains(key)) return ok_status();
      if (!e[key].is_boolean()) return section_error(where, fmt::format("\"{}\" must be a boolean", key));
      v = e[key].get<bool>();
      return ok_status();
    };
    DSV4_RETURN_IF_ERROR(flag("special", t.special));
    t.normalized = !t.special;  // the default when absent, as AddedToken::from(content, special)
    DSV4_RETURN_IF_ERROR(flag("normalized", t.normalized));
    DSV4_RETURN_IF_ERROR(flag("lstrip", t.lstrip));
    DSV4_RETURN_IF_ERROR(flag("rstrip", t.rstrip));
    DSV4_RETURN_IF_ERROR(flag("single_word", t.single_word));
    out.push_back(std::move(t));
  }
  return out;
}

Status check_decoder(const json& j) {
  if (j.is_object() && j.value("type", "") == "ByteLevel") return ok_status();
  return Status(StatusCode::unimplemented,
                fmt::format("decoder {} is not supported (only ByteLevel)", j.is_null() ? "null" : j.dump().substr(0, 80)));
}

StatusOr<std::shared_ptr<Tokenizer::Impl>> build(const json& root) {
  if (!root.is_object()) return section_error("tokenizer.json", "top level is not an object");
  if (!root.contains("model")) return section_error("tokenizer.json", "missing \"model\"");
  auto impl = std::make_shared<Tokenizer::Impl>();
  auto ctx = [](const Status& s, const char* section) { return s.with_context(section); };

  auto normalizer = Normalizer::from_json(root.value("normalizer", json()));
  if (!normalizer.ok()) return ctx(normalizer.status(), "normalizer");
  impl->normalizer = std::move(normalizer).value();
  auto pre = PreTokenizer::from_json(root.value("pre_tokenizer", json()));
  if (!pre.ok()) return ctx(pre.status(), "pre_tokenizer");
  impl->pre_tokenizer = std::move(pre).value();
  if (!impl->pre_tokenizer.byte_level())
    return section_error("pre_tokenizer", "must end in ByteLevel (only byte-level BPE is supported)");
  DSV4_RETURN_IF_ERROR(check_decoder(root.value("decoder", json())));
  auto bpe = BpeModel::from_json(root["model"]);
  if (!bpe.ok()) return bpe.status();
  impl->bpe = std::move(bpe).value();
  auto added = parse_added_tokens(root.value("added_tokens", json()));
  if (!added.ok()) return added.status();
  impl->added = std::move(added).value();

  // Id table: BPE vocab first, then added tokens (which may repeat a vocab entry with its id).
  const auto& vocab = impl->bpe.id_to_token();
  size_t n = vocab.size();
  for (const AddedToken& t : impl->added) n = std::max(n, static_cast<size_t>(t.id) + 1);
  impl->bytes.assign(n, std::string());
  impl->present.assign(n, false);
  impl->added_index.assign(n, -1);
  // ByteLevel decoding (`tokenizers`): a token whose chars are all in the byte alphabet stands for
  // those bytes; any other token stands for its own UTF-8.
  auto token_bytes = [](const std::string& s) { return byte_level::decode(s).value_or(s); };
  for (size_t id = 0; id < vocab.size(); ++id) {
    if (vocab[id].empty()) continue;
    impl->present[id] = true;
    impl->bytes[id] = token_bytes(vocab[id]);
  }
  for (size_t i = 0; i < impl->added.size(); ++i) {
    const AddedToken& t = impl->added[i];
    if (impl->added_index[t.id] >= 0)
      return section_error(fmt::format("added_tokens[{}]", i), fmt::format("id {} is already used by \"{}\"", t.id,
                                                                            impl->added[impl->added_index[t.id]].content));
    if (static_cast<size_t>(t.id) < vocab.size() && !vocab[t.id].empty() && vocab[t.id] != t.content)
      return section_error(fmt::format("added_tokens[{}]", i),
                           fmt::format("\"{}\" has id {} which the vocab gives to \"{}\"", t.content, t.id, vocab[t.id]));
    if (!impl->added_by_content.emplace(t.content, t.id).second)
      return section_error(fmt::format("added_tokens[{}]", i), fmt::format("content \"{}\" appears twice", t.content));
    impl->added_index[t.id] = static_cast<int32_t>(i);
    impl->present[t.id] = true;
    impl->bytes[t.id] = token_bytes(t.content);
  }
  std::vector<const AddedToken*> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (const AddedToken& t : impl->added) {
    if (t.normalized && !impl->normalizer.empty()) {
      normalized.push_back(&t);
      normalized_patterns.push_back(impl->normalizer.apply(t.content));
    } else if (t.normalized) {
      normalized.push_back(&t);
      normalized_patterns.push_back(t.content);
    } else {
      raw.push_back(&t);
      raw_patterns.push_back(t.content);
    }
  }
  impl->raw_matcher.build(raw, raw_patterns);
  impl->normalized_matcher.build(normalized, normalized_patterns);
  return impl;
}

}  // namespace

StatusOr<Tokenizer> Tokenizer::from_json(std::string_view json_text) {
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    return error(StatusCode::invalid_argument, "tokenizer.json is not valid JSON: {}", e.what());
  }
  try {
    auto impl = build(root);
    if (!impl.ok()) return impl.status().with_context("tokenizer.json");
    Tokenizer t;
    t.impl_ = std::move(impl).value();
    return t;
  } catch (const json::exception& e) {  // a value of an unexpected JSON type deep inside
    return error(StatusCode::invalid_argument, "tokenizer.json: {}", e.what());
  }
}

StatusOr<Tokenizer> Tokenizer::from_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error(StatusCode::not_found, "cannot open tokenizer file {}", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return error(StatusCode::data_loss, "cannot read tokenizer file {}", path);
  auto t = from_json(ss.str());
  if (!t.ok()) return t.status().with_context(path);
  return t;
}

void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<TokenId>& out) const {
  thread_local std::vector<std::string_view> pieces;
  std::deque<std::string> storage;
  pre_tokenizer.split(text, pieces, storage);
  // The per-thread word cache (1 MiB a thread) pays off on long texts only; a server's many threads tokenizing
  // short prompts would each keep one for nothing.
  if (text.size() < kWordCacheFrom) {
    for (std::string_view piece : pieces) bpe.encode_word(piece, out);
    return;
  }
  for (std::string_view piece : pieces) {
    if (WordCache::find(cache_owner, piece, out)) continue;
    size_t first = out.size();
    bpe.encode_word(piece, out);
    WordCache::put(cache_owner, piece, out.data() + first, out.size() - first);
  }
}

std::vector<TokenId> Tokenizer::encode(std::string_view text) const {
  std::vector<TokenId> out;
  encode(text, out);
  return out;
}

void Tokenizer::encode(std::string_view text, std::vector<TokenId>& out) const {
  const Impl& m = *impl_;
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::repair(text);
    text = repaired;
  }
  std::vector<AddedTokenMatcher::Segment> raw_segments, segments;
  m.raw_matcher.split(text, raw_segments);
  for (const auto& raw : raw_segments) {
    if (raw.id >= 0) {
      out.push_back(raw.id);
      continue;
    }
    std::string_view part = text.substr(raw.span.begin, raw.span.end - raw.span.begin);
    std::string normalized;
    if (!m.normalizer.empty()) {
      normalized = m.normalizer.apply(part);
      part = normalized;
    }
    segments.clear();
    m.normalized_matcher.split(part, segments);
    for (const auto& seg : segments) {
      if (seg.id >= 0) out.push_back(seg.id);
      else m.encode_plain(part.substr(seg.span.begin, seg.span.end - seg.span.begin), out);
    }
  }
}

StatusOr<std::string> Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  const Impl& m = *impl_;
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    TokenId id = ids[i];
    if (id < 0 || static_cast<size_t>(id) >= m.present.size() || !m.present[id])
      return error(StatusCode::out_of_range, "decode: ids[{}] = {} names no token (vocab size {})", i, id, vocab_size());
    if (skip_special_tokens && m.added_index[id] >= 0 && m.added[m.added_index[id]].special) continue;
    bytes += m.bytes[id];
  }
  if (utf8::is_valid(bytes)) return bytes;
  return utf8::repair(bytes);
}

std::optional<std::string_view> Tokenizer::token_bytes(TokenId id) const {
  const Impl& m = *impl_;
  if (id < 0 || static_cast<size_t>(id) >= m.present.size() || !m.present[id]) return std::nullopt;
  return std::string_view(m.bytes[id]);
}

std::optional<std::string_view> Tokenizer::id_to_token(TokenId id) const {
  const Impl& m = *impl_;
  if (id < 0 || static_cast<size_t>(id) >= m.present.size() || !m.present[id]) return std::nullopt;
  if (m.added_index[id] >= 0) return std::string_view(m.added[m.added_index[id]].content);
  return std::string_view(m.bpe.id_to_token()[id]);
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  const Impl& m = *impl_;
  std::string key(token);
  if (auto it = m.added_by_content.find(key); it != m.added_by_content.end()) return it->second;
  return m.bpe.find(token);
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->present.size()); }
int32_t Tokenizer::base_vocab_size() const { return static_cast<int32_t>(impl_->bpe.vocab_entries()); }
size_t Tokenizer::merge_count() const { return impl_->bpe.merge_count(); }
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

const AddedToken* Tokenizer::added_token(TokenId id) const {
  const Impl& m = *impl_;
  if (id < 0 || static_cast<size_t>(id) >= m.added_index.size() || m.added_index[id] < 0) return nullptr;
  return &m.added[m.added_index[id]];
}

bool Tokenizer::is_special(TokenId id) const {
  const AddedToken* t = added_token(id);
  return t != nullptr && t->special;
}

}  // namespace dsv4
