// SHA-256 through OpenSSL's EVP interface; files are read in large chunks on a second thread.
#include "core/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <utility>

namespace dsv4 {

// EVP calls fail only when allocation fails or the default provider lacks SHA-256: a broken
// installation, not bad input, so they are invariants rather than Status.
Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  DSV4_CHECK(ctx_ != nullptr);
  DSV4_CHECK(EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) == 1);
}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::Free::operator()(evp_md_ctx_st* ctx) const { EVP_MD_CTX_free(ctx); }

void Sha256::update(std::span<const uint8_t> bytes) {
  DSV4_CHECK(ctx_ != nullptr);
  if (!bytes.empty()) DSV4_CHECK(EVP_DigestUpdate(ctx_.get(), bytes.data(), bytes.size()) == 1);
}

std::array<uint8_t, 32> Sha256::finish() {
  DSV4_CHECK(ctx_ != nullptr);
  std::array<uint8_t, 32> out;
  unsigned int n = 0;
  DSV4_CHECK(EVP_DigestFinal_ex(ctx_.get(), out.data(), &n) == 1 && n == out.size());
  ctx_.reset();  // spent: a further update() or finish() is a caller bug and aborts
  return out;
}

std::string hex_digest(const std::array<uint8_t, 32>& d) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (uint8_t b : d) s += hex[b >> 4], s += hex[b & 15];
  return s;
}

std::string sha256_hex(std::span<const uint8_t> bytes) {
  Sha256 h;
  h.update(bytes);
  return hex_digest(h.finish());
}

namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Fills buf from offset until it is full or the file ends; returns the bytes read (short only at EOF).
StatusOr<size_t> read_chunk(int fd, const std::string& path, uint8_t* buf, size_t size, int64_t offset) {
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::pread(fd, buf + got, size - got, static_cast<off_t>(offset + static_cast<int64_t>(got)));
    if (n < 0) {
      if (errno == EINTR) continue;
      return error(StatusCode::data_loss, "{}: read error at byte {} while hashing: {}", path,
                   offset + static_cast<int64_t>(got), std::strerror(errno));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

}  // namespace

StatusOr<std::string> sha256_file_hex(const std::string& path, size_t chunk_bytes) {
  DSV4_CHECK(chunk_bytes > 0);
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) {
    const int e = errno;
    return error(e == ENOENT ? StatusCode::not_found : StatusCode::invalid_argument,
                 "{}: cannot open for hashing: {}", path, std::strerror(e));
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode))
    return error(StatusCode::invalid_argument, "{}: not a regular file, cannot hash", path);
  ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // advisory: a larger kernel read-ahead window

  // Two buffers: the reader fills buf[1 - cur] while this thread hashes buf[cur]. Only one read is
  // in flight, and never into the buffer being hashed.
  std::unique_ptr<uint8_t[]> buf[2] = {std::make_unique_for_overwrite<uint8_t[]>(chunk_bytes),
                                       std::make_unique_for_overwrite<uint8_t[]>(chunk_bytes)};
  Sha256 h;
  int cur = 0;
  int64_t offset = 0;
  DSV4_ASSIGN_OR_RETURN(size_t n, read_chunk(f.fd, path, buf[cur].get(), chunk_bytes, offset));
  while (n > 0) {
    offset += static_cast<int64_t>(n);
    // A short chunk means EOF was reached: nothing more to read.
    std::future<StatusOr<size_t>> next;
    if (n == chunk_bytes)
      next = std::async(std::launch::async, read_chunk, f.fd, std::cref(path), buf[1 - cur].get(), chunk_bytes, offset);
    h.update({buf[cur].get(), n});
    if (!next.valid()) break;
    DSV4_ASSIGN_OR_RETURN(n, next.get());
    cur = 1 - cur;
  }
  return hex_digest(h.finish());
}

}  // namespace dsv4
