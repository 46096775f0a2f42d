// Engram token map: raw token id -> compressed id (normalized-text classes), derived or read from JSON.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

struct EngramTokenMap {
  int32_t vocab_size = 0;             // raw ids covered (= token_map.size())
  int32_t compressed_vocab_size = 0;  // compressed ids are in [0, this): stated in the file, else max + 1
  int32_t pad_id = 0;                 // compressed id of the raw pad token (-1: not known yet)
  std::vector<int32_t> token_map;     // i32 [vocab_size]: raw id -> compressed id
};

// The normalizer chain of the Engram tokenizer (tokenizer-and-chat.md §3.2): NFKC, NFD, removal
// of every General_Category M code point, per-code-point full lowercase (no final-sigma context),
// runs of [ \t\r\n] -> " ", a string that is exactly " " survives the strip that follows
// (U+E000 sentinel), trim of Unicode White_Space, U+E000 -> " ". `text` must be valid UTF-8.
std::string engram_normalize(std::string_view text);

// For raw id 0..vocab_size-1: text = decode([id]) (special tokens kept); key = id_to_token(id)
// when text holds U+FFFD (a partial UTF-8 byte token), else normalize(text), or text itself when
// that is empty. Compressed ids are handed out in raw-id order of first appearance of each key,
// so on a collision the lowest raw id's key wins. Ids that name no token share the key "".
// pad_id = token_map[pad_token_id].
StatusOr<EngramTokenMap> build_engram_token_map(const Tokenizer& tokenizer, int32_t pad_token_id = 2);

// engram_token_map.json: {"vocab_size": N, "compressed_vocab_size": M, "pad_id": P,
// "token_map": [N ints]}. The counts are optional (also read: {"source": ..., "token_map": [...]}
// as `dsv4 synth` writes, and a bare array); when given they must agree: N entries, ids in
// [0, M), largest id M - 1. Without them M = largest id + 1 and pad_id = -1.
StatusOr<EngramTokenMap> parse_engram_token_map_json(std::string_view json_text);
std::string engram_token_map_to_json(const EngramTokenMap& map);
StatusOr<EngramTokenMap> read_engram_token_map_file(const std::string& path);
Status write_engram_token_map_file(const std::string& path, const EngramTokenMap& map);

// Refuses a map that does not fit the checkpoint's config (vocab_size, engram_compressed_vocab_size,
// the compressed id of engram_pad_token_id when the map states one), naming both numbers.
Status check_engram_token_map(const EngramTokenMap& map, int64_t config_vocab_size,
                              int64_t config_compressed_vocab_size, int64_t config_pad_token_id);

inline constexpr std::string_view kEngramTokenMapFile = "engram_token_map.json";

// The map for a checkpoint: `dir`/engram_token_map.json when present (no tokenizer needed),
// otherwise derived from `tokenizer` (nullptr: an error saying neither is available); either way
// checked against the config values; pad_id is set to the compressed id of config_pad_token_id.
StatusOr<EngramTokenMap> load_engram_token_map(const std::string& dir, const Tokenizer* tokenizer,
                                               int64_t config_vocab_size,
                                               int64_t config_compressed_vocab_size,
                                               int64_t config_pad_token_id);

}  // namespace dsv4
