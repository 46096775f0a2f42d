// SHA-256 (FIPS 180-4) of byte strings and files, for checking downloaded shards against known digests.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"

namespace dsv4 {

class Sha256 {
 public:
  Sha256();
  void update(std::span<const uint8_t> bytes);
  std::array<uint8_t, 32> finish();  // the object is spent afterwards

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  uint64_t total_ = 0;
  size_t used_ = 0;
};

// Lower-case hex of a digest.
std::string hex_digest(const std::array<uint8_t, 32>& d);
std::string sha256_hex(std::span<const uint8_t> bytes);
// Streams the file; errors name the path.
StatusOr<std::string> sha256_file_hex(const std::string& path);

}  // namespace dsv4
