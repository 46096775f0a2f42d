// Damaged inputs never crash the decoders: seeded byte flips, insertions and truncations of golden images
// either decode to a consistent image or fail with invalid_argument.
#include <gtest/gtest.h>

#include <random>

#include "vision/decode.h"
#include "vision/golden_testing.h"

namespace dsv4::vision {
namespace {

TEST(VisionDecodeFuzz, DamagedFilesFailCleanly) {
  std::mt19937 rng(20261206);
  int decoded = 0, refused = 0;
  for (const char* name : {"rgb_37x91.png", "palette4_37x91.png", "interlaced_37x91.png", "rgb16_37x91.png",
                           "q444_37x91.jpg", "progressive_37x91.jpg", "cmyk_37x91.jpg", "lossless_37x91.webp",
                           "lossy_alpha_37x91.webp", "palette_37x91.gif", "offset_frame_20x10.gif"}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> clean = testing::golden_image(name);
    for (int round = 0; round < 60; ++round) {
      std::vector<uint8_t> b = clean;
      const int kind = round % 3;
      if (kind == 0) {  // flip a few bytes past the signature
        for (int k = 0; k < 1 + round % 4; ++k) b[12 + rng() % (b.size() - 12)] ^= static_cast<uint8_t>(1 + rng() % 255);
      } else if (kind == 1) {  // cut the file short
        b.resize(12 + rng() % (b.size() - 12));
      } else {  // overwrite a run with one value (0x00 or 0xFF: lengths and markers)
        const size_t at = 12 + rng() % (b.size() - 12);
        const size_t n = std::min<size_t>(1 + rng() % 16, b.size() - at);
        std::fill_n(b.begin() + static_cast<std::ptrdiff_t>(at), n, (rng() & 1) ? 0xFF : 0x00);
      }
      DecodeLimits limits;
      limits.max_pixels = 1 << 20;  // a flipped header must not make a test allocate gigabytes
      StatusOr<Image> r = decode_image(b, "", limits);
      if (r.ok()) {
        ++decoded;
        EXPECT_EQ(r->rgb.size(), static_cast<size_t>(r->width) * r->height * 3);
      } else {
        ++refused;
        EXPECT_EQ(r.status().code(), StatusCode::invalid_argument) << r.status().to_string();
      }
    }
  }
  EXPECT_GT(refused, 100);  // damage is mostly noticed
  EXPECT_EQ(decoded + refused, 11 * 60);
}

}  // namespace
}  // namespace dsv4::vision
