// .npz writing against independent facts: the CRC-32 check value of "123456789" (0xCBF43926, the catalogue
// value of CRC-32/ISO-HDLC), the .npy 1.0 layout (magic, header length, 64-byte alignment), and a zip read back
// by walking its central directory as a reader does.
#include "core/npz.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace dsv4 {
namespace {

uint32_t le32(const uint8_t* p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (uint32_t(p[3]) << 24); }
uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

TEST(Npz, Crc32CheckValue) {
  const char* s = "123456789";
  EXPECT_EQ(crc32_ieee({reinterpret_cast<const uint8_t*>(s), 9}), 0xCBF43926u);
  // Continued over pieces, the same.
  const uint32_t a = crc32_ieee({reinterpret_cast<const uint8_t*>(s), 4});
  EXPECT_EQ(crc32_ieee({reinterpret_cast<const uint8_t*>(s) + 4, 5}, a), 0xCBF43926u);
}

TEST(Npz, NpyHeaderIsVersion1Aligned) {
  const std::vector<int64_t> shape{2, 3};
  const std::vector<float> v{1, 2, 3, 4, 5, 6};
  const auto b = npy_f32(shape, v);
  ASSERT_GE(b.size(), 10u);
  EXPECT_EQ(std::memcmp(b.data(), "\x93NUMPY\x01\x00", 8), 0);
  const size_t hl = le16(b.data() + 8);
  EXPECT_EQ((10 + hl) % 64, 0u);
  const std::string h(reinterpret_cast<const char*>(b.data()) + 10, hl);
  EXPECT_NE(h.find("'descr': '<f4'"), std::string::npos) << h;
  EXPECT_NE(h.find("'shape': (2, 3)"), std::string::npos) << h;
  EXPECT_EQ(h.back(), '\n');
  EXPECT_EQ(std::memcmp(b.data() + 10 + hl, v.data(), 24), 0);
  const auto one = npy_i32(std::vector<int64_t>{3}, std::vector<int32_t>{7, 8, 9});
  EXPECT_NE(std::string(reinterpret_cast<const char*>(one.data()) + 10, le16(one.data() + 8)).find("'shape': (3,)"),
            std::string::npos);
}

TEST(Npz, CentralDirectoryNamesEveryArrayWithItsCrcAndOffset) {
  const std::string path = (std::filesystem::temp_directory_path() / ("dsv4_npz_" + std::to_string(::getpid()) + ".npz")).string();
  NpzWriter w;
  ASSERT_TRUE(w.open(path).ok());
  const std::vector<float> a{1.5f, -2.0f};
  const std::vector<int32_t> t{5, 6, 7};
  ASSERT_TRUE(w.add_f32("layer_00", {1, 2}, a).ok());
  ASSERT_TRUE(w.add_i32("tokens", {3}, t).ok());
  EXPECT_FALSE(w.add_i32("bad", {4}, t).ok());
  ASSERT_TRUE(w.finish().ok());
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> z((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GE(z.size(), 22u);
  const uint8_t* eocd = z.data() + z.size() - 22;
  ASSERT_EQ(le32(eocd), 0x06054b50u);
  EXPECT_EQ(le16(eocd + 10), 2);
  const uint32_t cd_size = le32(eocd + 12), cd_off = le32(eocd + 16);
  EXPECT_EQ(cd_off + cd_size, z.size() - 22);
  const uint8_t* p = z.data() + cd_off;
  std::vector<std::string> names;
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(le32(p), 0x02014b50u);
    const uint32_t crc = le32(p + 16), size = le32(p + 20), off = le32(p + 42);
    const uint16_t nl = le16(p + 28);
    names.emplace_back(reinterpret_cast<const char*>(p + 46), nl);
    const uint8_t* local = z.data() + off;
    ASSERT_EQ(le32(local), 0x04034b50u);
    const uint8_t* data = local + 30 + le16(local + 26) + le16(local + 28);
    EXPECT_EQ(crc32_ieee({data, size}), crc) << names.back();
    p += 46 + nl;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"layer_00.npy", "tokens.npy"}));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace dsv4
