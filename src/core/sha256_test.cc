// SHA-256 against the published FIPS 180 example digests, coreutils sha256sum on a file, and chunked
// file reads against the whole buffer at sizes around the chunk boundary.
#include "core/sha256.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace dsv4 {
namespace {

std::span<const uint8_t> bytes_of(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

// Deterministic non-repeating bytes, so a misplaced or dropped chunk changes the digest.
std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 7919u + (i >> 9)) & 0xFFu);
  return v;
}

std::string temp_path(const char* tag) {
  return (std::filesystem::temp_directory_path() / fmt::format("dsv4_sha_{}_{}", tag, ::getpid())).string();
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
}

TEST(Sha256, FipsExamples) {
  // FIPS 180-2 Appendix B / NIST CSRC example values: "abc", the empty string, the 448-bit message.
  EXPECT_EQ(sha256_hex(bytes_of("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(bytes_of("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex(bytes_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // NIST's 896-bit example message (two blocks after padding).
  EXPECT_EQ(sha256_hex(bytes_of("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopq"
                                "rsmnopqrstnopqrstu")),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256, MillionAsInUnevenPieces) {
  // FIPS 180-2 B.3: one million 'a'; fed in pieces of 1..97 bytes so updates straddle block edges.
  const std::string a(1'000'000, 'a');
  Sha256 h;
  size_t at = 0;
  for (size_t step = 1; at < a.size(); step = step % 97 + 1) {
    const size_t n = std::min(step, a.size() - at);
    h.update(bytes_of(std::string_view(a).substr(at, n)));
    at += n;
  }
  EXPECT_EQ(hex_digest(h.finish()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(sha256_hex(bytes_of(a)), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, FileMatchesCoreutils) {
  const std::string path = temp_path("coreutils");
  write_file(path, pattern(3'000'000));  // not a multiple of a 1 MiB chunk
  std::FILE* p = popen(("sha256sum '" + path + "'").c_str(), "r");  // an implementation independent of ours
  ASSERT_NE(p, nullptr);
  char buf[65] = {};
  ASSERT_EQ(std::fread(buf, 1, 64, p), 64u);
  pclose(p);
  for (size_t chunk : {kSha256FileChunk, size_t{1} << 20}) {
    auto ours = sha256_file_hex(path, chunk);
    ASSERT_TRUE(ours.ok()) << ours.status().to_string();
    EXPECT_EQ(*ours, std::string(buf)) << chunk;
  }
  std::remove(path.c_str());
  auto gone = sha256_file_hex(path);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::not_found);
}

TEST(Sha256, ChunkedFileEqualsWholeBuffer) {
  // Chunk sizes that are and are not multiples of the 64-byte block; file sizes 0, 1, around one
  // and several chunks, so the last read is empty, short or exactly full.
  const std::string path = temp_path("chunks");
  for (size_t chunk : {size_t{1}, size_t{63}, size_t{64}, size_t{4096}, size_t{65'537}}) {
    for (size_t size : {size_t{0}, size_t{1}, chunk - 1, chunk, chunk + 1, 2 * chunk, 3 * chunk + 17, size_t{200'003}}) {
      if (chunk < 4096 && size > 4 * chunk + 17) continue;  // one read per chunk: keep tiny-chunk files short
      SCOPED_TRACE(fmt::format("chunk {} size {}", chunk, size));
      const std::vector<uint8_t> bytes = pattern(size);
      write_file(path, bytes);
      auto file = sha256_file_hex(path, chunk);
      ASSERT_TRUE(file.ok()) << file.status().to_string();
      EXPECT_EQ(*file, sha256_hex(bytes));
    }
  }
  std::remove(path.c_str());
}

TEST(Sha256, RefusesADirectory) {
  auto d = sha256_file_hex(std::filesystem::temp_directory_path().string());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::invalid_argument);
}

}  // namespace
}  // namespace dsv4
