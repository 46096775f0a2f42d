// SHA-256 (FIPS 180-4) of byte strings and files through OpenSSL, for checking downloaded shards against known digests.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX; the header stays free of <openssl/*>

namespace dsv4 {

// Incremental digest: any split of the input into update() calls gives the same digest.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  void update(std::span<const uint8_t> bytes);
  std::array<uint8_t, 32> finish();  // the object is spent afterwards

 private:
  struct Free {
    void operator()(evp_md_ctx_st* ctx) const;
  };
  std::unique_ptr<evp_md_ctx_st, Free> ctx_;
};

// Lower-case hex of a digest.
std::string hex_digest(const std::array<uint8_t, 32>& d);
std::string sha256_hex(std::span<const uint8_t> bytes);

// Bytes per read when hashing a file: large sequential reads keep a multi-GiB shard at disk speed.
inline constexpr size_t kSha256FileChunk = size_t{16} << 20;
// Streams the file in chunk_bytes reads; a second thread reads the next chunk while this one hashes
// the last, so reading and hashing overlap. Errors name the path.
StatusOr<std::string> sha256_file_hex(const std::string& path, size_t chunk_bytes = kSha256FileChunk);

}  // namespace dsv4
