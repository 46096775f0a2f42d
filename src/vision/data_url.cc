// data: URL parsing: media type, base64 or percent-encoded payload, size limit.
#include "vision/data_url.h"

#include <algorithm>

namespace dsv4::vision {
namespace {

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string printable(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x20 && u < 0x7F ? fmt::format("'{}'", c) : fmt::format("byte 0x{:02X}", u);
}

}  // namespace

StatusOr<std::vector<uint8_t>> decode_base64(std::string_view text, size_t max_bytes, std::string_view what) {
  std::vector<uint8_t> out;
  out.reserve(std::min(text.size() / 4 * 3 + 3, max_bytes + 3));
  uint32_t acc = 0;
  int digits = 0;    // digits in the current group of four
  int padding = 0;   // '=' seen; only whitespace may follow once the group is complete
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (is_space(c)) continue;
    if (c == '=') {
      if (digits < 2) return error(StatusCode::invalid_argument, "{}: padding '=' at offset {} is misplaced", what, i);
      ++padding;
      if (digits + padding > 4) return error(StatusCode::invalid_argument, "{}: too much padding at offset {}", what, i);
      continue;
    }
    const int v = base64_value(c);
    if (v < 0) {
      return error(StatusCode::invalid_argument, "{}: not base64: {} at offset {}", what, printable(c), i);
    }
    if (padding) return error(StatusCode::invalid_argument, "{}: data after '=' padding at offset {}", what, i);
    acc = (acc << 6) | static_cast<uint32_t>(v);
    if (++digits == 4) {
      out.insert(out.end(), {static_cast<uint8_t>(acc >> 16), static_cast<uint8_t>(acc >> 8), static_cast<uint8_t>(acc)});
      acc = 0, digits = 0;
      if (out.size() > max_bytes) {
        return error(StatusCode::invalid_argument, "{}: decodes to more than the limit of {} bytes", what, max_bytes);
      }
    }
  }
  if (digits == 1) return error(StatusCode::invalid_argument, "{}: truncated: a dangling base64 digit at the end", what);
  if (padding && digits + padding != 4) return error(StatusCode::invalid_argument, "{}: incomplete padding", what);
  if (digits == 2) out.push_back(static_cast<uint8_t>(acc >> 4));
  if (digits == 3) out.insert(out.end(), {static_cast<uint8_t>(acc >> 10), static_cast<uint8_t>(acc >> 2)});
  if (out.size() > max_bytes) {
    return error(StatusCode::invalid_argument, "{}: decodes to more than the limit of {} bytes", what, max_bytes);
  }
  return out;
}

StatusOr<DataUrl> parse_data_url(std::string_view url, size_t max_bytes) {
  if (url.size() < 5 || lower(url.substr(0, 5)) != "data:") {
    return error(StatusCode::invalid_argument, "not a data: URL (it starts '{}')", url.substr(0, std::min<size_t>(url.size(), 16)));
  }
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) return error(StatusCode::invalid_argument, "data: URL has no ',' before its data");
  std::string_view header = url.substr(5, comma - 5);
  const std::string_view payload = url.substr(comma + 1);

  DataUrl out;
  // mediatype [";" param]* [";base64"]; the media type is the part before the first ';'.
  const size_t semi = header.find(';');
  out.mime = lower(trim(header.substr(0, semi)));
  for (size_t at = semi; at != std::string_view::npos;) {
    const size_t next = header.find(';', at + 1);
    const std::string param = lower(trim(header.substr(at + 1, next == std::string_view::npos ? std::string_view::npos : next - at - 1)));
    if (param == "base64") {
      if (next != std::string_view::npos) {
        return error(StatusCode::invalid_argument, "data: URL: ';base64' must be the last parameter");
      }
      out.base64 = true;
    }
    at = next;
  }
  if (trim(payload).empty()) return error(StatusCode::invalid_argument, "data: URL has an empty payload");

  if (out.base64) {
    // Percent escapes are allowed in any URL; a base64 payload may carry them (e.g. %2B for '+').
    std::string unescaped;
    if (payload.find('%') != std::string_view::npos) {
      for (size_t i = 0; i < payload.size(); ++i) {
        if (payload[i] == '%' && i + 2 < payload.size() && hex_value(payload[i + 1]) >= 0 && hex_value(payload[i + 2]) >= 0) {
          unescaped.push_back(static_cast<char>(hex_value(payload[i + 1]) * 16 + hex_value(payload[i + 2])));
          i += 2;
        } else {
          unescaped.push_back(payload[i]);
        }
      }
    }
    DSV4_ASSIGN_OR_RETURN(out.bytes, decode_base64(unescaped.empty() ? payload : std::string_view(unescaped), max_bytes,
                                                   "data: URL payload"));
    if (out.bytes.empty()) return error(StatusCode::invalid_argument, "data: URL has an empty payload");
    return out;
  }
  for (size_t i = 0; i < payload.size(); ++i) {
    if (payload[i] != '%') {
      out.bytes.push_back(static_cast<uint8_t>(payload[i]));
    } else {
      const int hi = i + 1 < payload.size() ? hex_value(payload[i + 1]) : -1;
      const int lo = i + 2 < payload.size() ? hex_value(payload[i + 2]) : -1;
      if (hi < 0 || lo < 0) {
        return error(StatusCode::invalid_argument, "data: URL: bad percent escape at offset {} of the payload", i);
      }
      out.bytes.push_back(static_cast<uint8_t>(hi * 16 + lo));
      i += 2;
    }
    if (out.bytes.size() > max_bytes) {
      return error(StatusCode::invalid_argument, "data: URL payload: decodes to more than the limit of {} bytes", max_bytes);
    }
  }
  return out;
}

}  // namespace dsv4::vision
