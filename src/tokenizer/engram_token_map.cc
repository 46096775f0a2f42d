// Engram compressed token map: the ICU normalizer chain, first-appearance id assignment, JSON I/O.
#include "tokenizer/engram_token_map.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/ustring.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace dsv4 {
namespace {

constexpr UChar32 kSentinel = 0xE000;

// Full lowercase of one code point (Rust char::to_lowercase): ICU root-locale mapping of the code
// point alone, so no final-sigma context applies.
void append_lower(UChar32 c, std::u32string& out) {
  UChar src[2];
  int32_t src_len = 0;
  U16_APPEND_UNSAFE(src, src_len, c);
  UChar dst[8];
  UErrorCode status = U_ZERO_ERROR;
  const int32_t n = u_strToLower(dst, 8, src, src_len, "", &status);
  if (U_FAILURE(status)) {
    out.push_back(c);
    return;
  }
  for (int32_t i = 0; i < n;) {
    UChar32 d;
    U16_NEXT(dst, i, n, d);
    out.push_back(d);
  }
}

bool is_mark(UChar32 c) {
  const int8_t t = u_charType(c);
  return t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK || t == U_ENCLOSING_MARK;
}

std::string to_utf8(const std::u32string& cps) {
  icu::UnicodeString s;
  for (UChar32 c : cps) s.append(c);
  std::string out;
  s.toUTF8String(out);
  return out;
}

}  // namespace

std::string engram_normalize(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(status);
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
  DSV4_CHECK(U_SUCCESS(status) && nfkc && nfd);  // ICU data is linked in
  icu::UnicodeString s = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  s = nfkc->normalize(s, status);
  s = nfd->normalize(s, status);
  DSV4_CHECK(U_SUCCESS(status));
  // StripAccents (all of category M), then Lowercase, then collapse [ \t\r\n]+ to one space.
  std::u32string lowered;
  for (int32_t i = 0; i < s.length();) {
    const UChar32 c = s.char32At(i);
    i += U16_LENGTH(c);
    if (!is_mark(c)) append_lower(c, lowered);
  }
  // Every run of [ \t\r\n] becomes one space (a space is itself in the class, so a run is
  // exactly "the last output is a space").
  std::u32string collapsed;
  for (UChar32 c : lowered) {
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      if (collapsed.empty() || collapsed.back() != U' ') collapsed.push_back(U' ');
    } else {
      collapsed.push_back(c);
    }
  }
  if (collapsed == U" ") collapsed = std::u32string(1, kSentinel);
  size_t begin = 0, end = collapsed.size();
  while (begin < end && u_isUWhiteSpace(collapsed[begin])) ++begin;
  while (end > begin && u_isUWhiteSpace(collapsed[end - 1])) --end;
  std::u32string stripped = collapsed.substr(begin, end - begin);
  for (char32_t& c : stripped)
    if (c == static_cast<char32_t>(kSentinel)) c = U' ';
  return to_utf8(stripped);
}

StatusOr<EngramTokenMap> build_engram_token_map(const Tokenizer& tokenizer, int32_t pad_token_id) {
  EngramTokenMap map;
  map.vocab_size = tokenizer.vocab_size();
  if (pad_token_id < 0 || pad_token_id >= map.vocab_size)
    return error(StatusCode::invalid_argument, "engram pad token id {} is outside the vocabulary (size {})",
                 pad_token_id, map.vocab_size);
  map.token_map.resize(static_cast<size_t>(map.vocab_size));
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(static_cast<size_t>(map.vocab_size));
  for (int32_t id = 0; id < map.vocab_size; ++id) {
    const TokenId one[1] = {id};
    auto text = tokenizer.decode(one, /*skip_special_tokens=*/false);
    std::string key;
    if (text.ok()) {
      if (text->find("\xEF\xBF\xBD") != std::string::npos) {
        key = std::string(*tokenizer.id_to_token(id));
      } else {
        key = engram_normalize(*text);
        if (key.empty()) key = *text;
      }
    }
    auto [it, inserted] = ids.emplace(std::move(key), static_cast<int32_t>(ids.size()));
    map.token_map[static_cast<size_t>(id)] = it->second;
  }
  map.compressed_vocab_size = static_cast<int32_t>(ids.size());
  map.pad_id = map.token_map[static_cast<size_t>(pad_token_id)];
  return map;
}

StatusOr<EngramTokenMap> parse_engram_token_map_json(std::string_view json_text) {
  const auto j = nlohmann::json::parse(json_text, nullptr, false);
  if (j.is_discarded() || !(j.is_object() || j.is_array()))
    return error(StatusCode::data_loss, "engram token map: not a JSON object or array");
  // The counts are optional (a bare array and {"source", "token_map"} as `dsv4 synth` writes are
  // read too); when present they must agree with the array.
  auto count = [&](const char* key, int64_t& out) -> Status {
    if (!j.is_object() || !j.contains(key)) return ok_status();
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < 0 || j[key].get<int64_t>() > INT32_MAX)
      return error(StatusCode::data_loss, "engram token map: \"{}\" must be a non-negative integer", key);
    out = j[key].get<int64_t>();
    return ok_status();
  };
  int64_t vocab = -1, compressed = -1, pad = -1;
  DSV4_RETURN_IF_ERROR(count("vocab_size", vocab));
  DSV4_RETURN_IF_ERROR(count("compressed_vocab_size", compressed));
  DSV4_RETURN_IF_ERROR(count("pad_id", pad));
  const nlohmann::json* arr = &j;
  if (j.is_object()) {
    if (!j.contains("token_map") || !j["token_map"].is_array())
      return error(StatusCode::data_loss, "engram token map: \"token_map\" must be an array");
    arr = &j["token_map"];
  }
  if (vocab >= 0 && arr->size() != static_cast<size_t>(vocab))
    return error(StatusCode::data_loss, "engram token map: token_map has {} entries, vocab_size says {}",
                 arr->size(), vocab);
  EngramTokenMap map;
  map.token_map.reserve(arr->size());
  int64_t max_id = -1;
  for (size_t i = 0; i < arr->size(); ++i) {
    const auto& e = (*arr)[i];
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX)
      return error(StatusCode::data_loss, "engram token map: token_map[{}] is not a compressed id", i);
    const int64_t v = e.get<int64_t>();
    if (compressed >= 0 && v >= compressed)
      return error(StatusCode::data_loss,
                   "engram token map: token_map[{}] = {} is outside [0, compressed_vocab_size {})", i, v,
                   compressed);
    max_id = std::max(max_id, v);
    map.token_map.push_back(static_cast<int32_t>(v));
  }
  // A stated compressed_vocab_size bounds the ids (checked above); a map need not use its last id (a synthetic
  // map drawn at random may not), and the hash multipliers follow the stated size. Unstated: the largest id + 1.
  map.vocab_size = static_cast<int32_t>(map.token_map.size());
  map.compressed_vocab_size = static_cast<int32_t>(compressed >= 0 ? compressed : max_id + 1);
  if (pad >= map.compressed_vocab_size && map.compressed_vocab_size > 0)
    return error(StatusCode::data_loss, "engram token map: pad_id {} is outside [0, {})", pad,
                 map.compressed_vocab_size);
  map.pad_id = static_cast<int32_t>(pad);  // -1: not stated; check_engram_token_map fills it in
  return map;
}

std::string engram_token_map_to_json(const EngramTokenMap& map) {
  std::string out = fmt::format("{{\"vocab_size\": {}, \"compressed_vocab_size\": {}, \"pad_id\": {}, \"token_map\": [",
                                map.vocab_size, map.compressed_vocab_size, map.pad_id);
  for (size_t i = 0; i < map.token_map.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(map.token_map[i]);
  }
  out += "]}\n";
  return out;
}

StatusOr<EngramTokenMap> read_engram_token_map_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error(StatusCode::not_found, "{}: cannot open", path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto map = parse_engram_token_map_json(ss.str());
  if (!map.ok()) return map.status().with_context(path);
  return map;
}

Status write_engram_token_map_file(const std::string& path, const EngramTokenMap& map) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return error(StatusCode::not_found, "{}: cannot open for writing", path);
  out << engram_token_map_to_json(map);
  out.flush();
  if (!out) return error(StatusCode::resource_exhausted, "{}: write failed", path);
  return ok_status();
}

Status check_engram_token_map(const EngramTokenMap& map, int64_t config_vocab_size,
                              int64_t config_compressed_vocab_size, int64_t config_pad_token_id) {
  if (map.compressed_vocab_size != config_compressed_vocab_size)
    return error(StatusCode::invalid_argument,
                 "engram token map has {} compressed ids but the config's engram_compressed_vocab_size "
                 "is {} (a tokenizer or map that does not belong to this checkpoint)",
                 map.compressed_vocab_size, config_compressed_vocab_size);
  if (map.vocab_size != config_vocab_size)
    return error(StatusCode::invalid_argument,
                 "engram token map covers {} raw ids but the config's vocab_size is {}", map.vocab_size,
                 config_vocab_size);
  if (config_pad_token_id < 0 || config_pad_token_id >= map.vocab_size ||
      (map.pad_id >= 0 && map.token_map[static_cast<size_t>(config_pad_token_id)] != map.pad_id))
    return error(StatusCode::invalid_argument,
                 "engram token map pad_id {} is not the compressed id of engram_pad_token_id {}", map.pad_id,
                 config_pad_token_id);
  return ok_status();
}

StatusOr<EngramTokenMap> load_engram_token_map(const std::string& dir, const Tokenizer* tokenizer,
                                               int64_t config_vocab_size,
                                               int64_t config_compressed_vocab_size,
                                               int64_t config_pad_token_id) {
  const std::string path = (std::filesystem::path(dir) / kEngramTokenMapFile).string();
  StatusOr<EngramTokenMap> map = Status(StatusCode::internal, "unset");
  if (std::filesystem::exists(path)) {
    map = read_engram_token_map_file(path);
  } else if (tokenizer != nullptr) {
    map = build_engram_token_map(*tokenizer, static_cast<int32_t>(config_pad_token_id));
  } else {
    return error(StatusCode::not_found, "{}: missing, and no tokenizer to derive the Engram token map from", path);
  }
  if (!map.ok()) return map.status();
  const Status s = check_engram_token_map(*map, config_vocab_size, config_compressed_vocab_size, config_pad_token_id);
  if (!s.ok()) return s.with_context(std::filesystem::exists(path) ? path : "derived from the tokenizer");
  map->pad_id = map->token_map[static_cast<size_t>(config_pad_token_id)];
  return map;
}

}  // namespace dsv4
