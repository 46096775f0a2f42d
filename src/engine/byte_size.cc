// Byte-size parsing and printing (see byte_size.h).
#include "engine/byte_size.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace dsv4::engine {

namespace {

std::string lower(std::string_view s) {
  std::string out;
  for (char c : s) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Bytes per unit of a suffix, or 0 when it is not one.
double unit_of(const std::string& s) {
  if (s.empty() || s == "b") return 1;
  static const struct {
    const char* binary1;  // "k"
    const char* binary2;  // "kib"
    const char* binary3;  // "ki"
    const char* decimal;  // "kb"
    int power;
  } kUnits[] = {{"k", "kib", "ki", "kb", 1}, {"m", "mib", "mi", "mb", 2}, {"g", "gib", "gi", "gb", 3},
                {"t", "tib", "ti", "tb", 4}};
  for (const auto& u : kUnits) {
    if (s == u.binary1 || s == u.binary2 || s == u.binary3) return std::pow(1024.0, u.power);
    if (s == u.decimal) return std::pow(1000.0, u.power);
  }
  return 0;
}

}  // namespace

StatusOr<int64_t> parse_byte_size(std::string_view text) {
  const std::string t = lower(text);
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  const std::string number = t.substr(0, i);
  size_t j = i;
  while (j < t.size() && t[j] == ' ') ++j;
  const double unit = unit_of(t.substr(j));
  char* end = nullptr;
  const double value = number.empty() ? 0 : std::strtod(number.c_str(), &end);
  if (number.empty() || end != number.c_str() + number.size() || unit == 0 || !(value > 0))
    return error(StatusCode::invalid_argument,
                 "'{}' is not a size: write bytes or a number with K/M/G/T (powers of 1024, also KiB..TiB) or "
                 "KB/MB/GB/TB (powers of 1000), e.g. 80G or 141GB",
                 text);
  const double bytes = std::floor(value * unit);
  if (bytes < 1 || bytes >= std::ldexp(1.0, 62))
    return error(StatusCode::invalid_argument, "size '{}' is out of range (1 byte to 4 EiB)", text);
  return static_cast<int64_t>(bytes);
}

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (std::llabs(bytes) >= kGiB) return fmt::format("{:.2f} GiB", b / kGiB);
  if (std::llabs(bytes) >= kMiB) return fmt::format("{:.1f} MiB", b / kMiB);
  if (std::llabs(bytes) >= kKiB) return fmt::format("{:.1f} KiB", b / kKiB);
  return fmt::format("{} B", bytes);
}

std::string format_gib(int64_t bytes) { return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / kGiB); }

}  // namespace dsv4::engine
