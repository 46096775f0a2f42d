// Prompt positions fed as given embedding rows (Request::embeds, an image's span): their checks, the cut a prompt
// piece carries, and their keys in the prompt cache.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/prompt_cache.h"
#include "core/status.h"
#include "lanes/backend.h"
#include "lanes/engine_api.h"

namespace dsv4::lanes {

// Longest span a PromptEmbeds may have (its offsets fill 20 bits of a cache key).
inline constexpr int64_t kMaxEmbedSpan = int64_t{1} << 20;

// Refuses (invalid_argument, naming the span) embeds on a backend without embed_dim, spans that are empty, longer than
// kMaxEmbedSpan, unsorted or overlapping, outside the prompt or reaching its last position, and values of another
// size than count x embed_dim.
Status check_embeds(const Request& request, int64_t embed_dim);

// The rows of request.embeds inside prompt positions [start, start + count), as a piece's EmbedRows.
std::vector<EmbedRows> piece_embeds(const Request& request, int64_t start, int64_t count, int64_t embed_dim);

// The cache key of position `offset` of span `e`: bit 63 set (no token id has it), bit 62 the image flag, bits 42..61
// the offset, bits 0..41 the digest's 42-bit chunk (offset mod 7) — chunk j is bits [42j, 42j + 42) of the digest read
// as a little-endian 256-bit number. A prefix holding 7 or more positions of a span compares the whole digest; one
// holding fewer compares 42 bits per position (its first position is the image_start row, the same for every image).
cache::Key embed_key(const PromptEmbeds& e, int64_t offset);

// The prompt's cache keys: token ids, and embed_key for the positions of request.embeds.
std::vector<cache::Key> prompt_keys(const Request& request);

}  // namespace dsv4::lanes
