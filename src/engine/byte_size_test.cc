// Byte sizes: K/M/G/T and KiB.. are powers of 1024, KB/MB/GB/TB powers of 1000; printing in GiB.
#include "engine/byte_size.h"

#include <gtest/gtest.h>

namespace dsv4::engine {
namespace {

TEST(ByteSize, ParsesBinaryAndDecimalSuffixes) {
  EXPECT_EQ(*parse_byte_size("80G"), 80LL * 1024 * 1024 * 1024);  // 85,899,345,920
  EXPECT_EQ(*parse_byte_size("80GiB"), 85899345920LL);
  EXPECT_EQ(*parse_byte_size("80gi"), 85899345920LL);
  EXPECT_EQ(*parse_byte_size("141GB"), 141000000000LL);
  EXPECT_EQ(*parse_byte_size("141 gb"), 141000000000LL);
  EXPECT_EQ(*parse_byte_size("512MiB"), 536870912LL);
  EXPECT_EQ(*parse_byte_size("512M"), 536870912LL);
  EXPECT_EQ(*parse_byte_size("1.5T"), 1649267441664LL);  // 1.5 x 2^40
  EXPECT_EQ(*parse_byte_size("2TB"), 2000000000000LL);
  EXPECT_EQ(*parse_byte_size("4096"), 4096);
  EXPECT_EQ(*parse_byte_size("4096B"), 4096);
  EXPECT_EQ(*parse_byte_size("1k"), 1024);
  EXPECT_EQ(*parse_byte_size("1KB"), 1000);
}

TEST(ByteSize, RefusesWhatIsNotASize) {
  for (const char* bad : {"", "G", "80X", "-5G", "0", "1e3", "80 G B", "1.2.3G", "99999999E"}) {
    auto r = parse_byte_size(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) EXPECT_EQ(r.status().code(), StatusCode::invalid_argument) << bad;
  }
  EXPECT_FALSE(parse_byte_size("9000000T").ok());  // past 2^62
}

TEST(ByteSize, Prints) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3 * 1024 + 512), "3.5 KiB");
  EXPECT_EQ(format_bytes(int64_t{5} << 20), "5.0 MiB");
  EXPECT_EQ(format_bytes(85899345920LL), "80.00 GiB");
  EXPECT_EQ(format_gib(int64_t{3} << 29), "1.50 GiB");
}

}  // namespace
}  // namespace dsv4::engine
