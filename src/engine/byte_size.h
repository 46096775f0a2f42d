// Byte counts as people write them ("80G", "141GB", "512MiB") and as the memory plan prints them.
//
// Suffixes (case-insensitive, optional space): none or B = bytes; K, M, G, T and KiB, MiB, GiB, TiB are
// powers of 1024 (2^10 .. 2^40), as `free -h` and most sizing flags read them; KB, MB, GB, TB are powers
// of 1000 (10^3 .. 10^12), as disk and GPU vendors print them. So "80G" = 80 GiB = 85,899,345,920 bytes
// and "141GB" = 141,000,000,000 bytes. A fraction is allowed ("1.5T"); the result is rounded down.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace dsv4::engine {

inline constexpr int64_t kKiB = int64_t{1} << 10;
inline constexpr int64_t kMiB = int64_t{1} << 20;
inline constexpr int64_t kGiB = int64_t{1} << 30;

// invalid_argument naming the text when it is not a positive size below 2^62 bytes.
StatusOr<int64_t> parse_byte_size(std::string_view text);

// "512 B", "12.0 KiB", "3.4 MiB", "61.25 GiB": two decimals from GiB up, one below.
std::string format_bytes(int64_t bytes);
// Always in GiB with two decimals ("0.02 GiB"), for columns and messages that compare numbers.
std::string format_gib(int64_t bytes);

}  // namespace dsv4::engine
