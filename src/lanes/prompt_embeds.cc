// Given embedding rows of a prompt: checks, piece cuts, cache keys (see prompt_embeds.h).
#include "lanes/prompt_embeds.h"

#include <algorithm>

namespace dsv4::lanes {

Status check_embeds(const Request& r, int64_t embed_dim) {
  if (r.embeds.empty()) return ok_status();
  if (embed_dim <= 0)
    return error(StatusCode::invalid_argument, "this backend takes no embedding rows (no images or other embeddings)");
  const int64_t last = static_cast<int64_t>(r.prompt.size()) - 1;
  int64_t end = 0;
  for (size_t i = 0; i < r.embeds.size(); ++i) {
    const PromptEmbeds& e = r.embeds[i];
    if (e.count < 1 || e.count > kMaxEmbedSpan)
      return error(StatusCode::invalid_argument, "embeds[{}] has {} rows, outside [1, {}]", i, e.count, kMaxEmbedSpan);
    if (e.start < end)
      return error(StatusCode::invalid_argument, "embeds[{}] starts at {}, before the end {} of the span before it", i,
                   e.start, end);
    if (e.start + e.count > last)
      return error(StatusCode::invalid_argument,
                   "embeds[{}] covers positions [{}, {}) of a {}-token prompt: spans must end before its last token", i,
                   e.start, e.start + e.count, r.prompt.size());
    if (e.values == nullptr || static_cast<int64_t>(e.values->size()) != e.count * embed_dim)
      return error(StatusCode::invalid_argument, "embeds[{}] holds {} values, expected {} rows x {}", i,
                   e.values ? e.values->size() : 0, e.count, embed_dim);
    end = e.start + e.count;
  }
  return ok_status();
}

std::vector<EmbedRows> piece_embeds(const Request& r, int64_t start, int64_t count, int64_t embed_dim) {
  std::vector<EmbedRows> out;
  const int64_t end = start + count;
  for (const PromptEmbeds& e : r.embeds) {
    const int64_t from = std::max(start, e.start), to = std::min(end, e.start + e.count);
    if (from >= to) continue;
    const size_t at = static_cast<size_t>((from - e.start) * embed_dim);
    out.push_back(EmbedRows{from - start, to - from,
                            std::span<const uint16_t>(e.values->data() + at, static_cast<size_t>((to - from) * embed_dim)),
                            e.image});
  }
  return out;
}

cache::Key embed_key(const PromptEmbeds& e, int64_t offset) {
  const int chunk = static_cast<int>(offset % 7);
  uint64_t bits = 0;
  for (int b = 0; b < 42; ++b) {
    const int at = chunk * 42 + b;  // bit of the digest, little-endian
    if (at < 256 && ((e.digest[static_cast<size_t>(at / 8)] >> (at % 8)) & 1)) bits |= uint64_t{1} << b;
  }
  return (uint64_t{1} << 63) | (uint64_t{e.image} << 62) |
         ((static_cast<uint64_t>(offset) & (kMaxEmbedSpan - 1)) << 42) | bits;
}

std::vector<cache::Key> prompt_keys(const Request& r) {
  std::vector<cache::Key> keys = cache::token_keys(r.prompt);
  for (const PromptEmbeds& e : r.embeds)
    for (int64_t k = 0; k < e.count && e.start + k < static_cast<int64_t>(keys.size()); ++k)
      keys[static_cast<size_t>(e.start + k)] = embed_key(e, k);
  return keys;
}

}  // namespace dsv4::lanes
