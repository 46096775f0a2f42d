// UTF-8 well-formedness (Unicode Table 3-7), maximal-subpart repair and streaming prefix rules.
#include "tokenizer/utf8.h"

namespace dsv4::utf8 {
namespace {

// Allowed range of the second byte for a given lead byte (Table 3-7); the later bytes are 80..BF.
struct LeadInfo {
  uint8_t length;  // 0 for bytes that never start a sequence
  uint8_t lo, hi;  // range of the second byte
};

LeadInfo lead_info(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Number of bytes from s[pos] that form a prefix of a well-formed sequence (1..length).
size_t well_formed_prefix(std::string_view s, size_t pos, const LeadInfo& info) {
  size_t n = 1;
  for (; n < info.length && pos + n < s.size(); ++n) {
    uint8_t c = static_cast<uint8_t>(s[pos + n]);
    bool ok = n == 1 ? (c >= info.lo && c <= info.hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) break;
  }
  return n;
}

}  // namespace

size_t valid_multibyte_length(std::string_view s, size_t pos) {
  LeadInfo info = lead_info(static_cast<uint8_t>(s[pos]));
  if (info.length <= 1) return info.length;
  return well_formed_prefix(s, pos, info) == info.length ? info.length : 0;
}

size_t maximal_subpart_length(std::string_view s, size_t pos) {
  LeadInfo info = lead_info(static_cast<uint8_t>(s[pos]));
  if (info.length == 0) return 1;
  return well_formed_prefix(s, pos, info);
}

bool is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<uint8_t>(s[i]) < 0x80) { ++i; continue; }
    size_t n = valid_multibyte_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string repair(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    size_t n = valid_sequence_length(s, i);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      append(out, kReplacement);
      i += maximal_subpart_length(s, i);
    }
  }
  return out;
}

char32_t decode_at(std::string_view s, size_t pos, size_t len) {
  auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<uint8_t>(s[pos + k])); };
  switch (len) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t stable_prefix_length(std::string_view s) {
  // Only the last (at most 3) bytes can be an unfinished sequence; find where it would start.
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    size_t pos = n - back;
    LeadInfo info = lead_info(static_cast<uint8_t>(s[pos]));
    if (info.length == 0 && (static_cast<uint8_t>(s[pos]) & 0xC0) == 0x80) continue;  // trail byte
    // s[pos] is a lead (or ASCII, or an invalid lead): the tail is unfinished iff it is a proper
    // prefix of a well-formed sequence.
    if (info.length > back && well_formed_prefix(s, pos, info) == back) return pos;
    return n;
  }
  return n;
}

}  // namespace dsv4::utf8
