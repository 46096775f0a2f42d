// SHA-256 against the FIPS 180-4 example digests and coreutils sha256sum on a file.
#include "core/sha256.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace dsv4 {
namespace {

std::span<const uint8_t> bytes_of(std::string_view s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

TEST(Sha256, FipsExamples) {
  // FIPS 180-4 / NIST CSRC example values for "abc", the empty string and the 448-bit message.
  EXPECT_EQ(sha256_hex(bytes_of("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(bytes_of("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex(bytes_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, FileMatchesCoreutils) {
  const std::string path = (std::filesystem::temp_directory_path() / fmt::format("dsv4_sha_{}", ::getpid())).string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  for (uint32_t i = 0; i < 3'000'000u; ++i) std::fputc(static_cast<int>((i * 7919u + (i >> 9)) & 0xFFu), f);  // crosses the 1 MiB reads
  std::fclose(f);
  std::FILE* p = popen(("sha256sum '" + path + "'").c_str(), "r");  // an implementation independent of ours
  ASSERT_NE(p, nullptr);
  char buf[65] = {};
  ASSERT_EQ(std::fread(buf, 1, 64, p), 64u);
  pclose(p);
  auto ours = sha256_file_hex(path);
  ASSERT_TRUE(ours.ok());
  EXPECT_EQ(*ours, std::string(buf));
  std::remove(path.c_str());
  EXPECT_FALSE(sha256_file_hex(path).ok());
}

}  // namespace
}  // namespace dsv4
