// The bicubic resize against Pillow 9.4's Image.resize(..., BICUBIC) on golden pictures, byte for byte.
#include "vision/resample.h"

#include <gtest/gtest.h>

#include "vision/decode.h"
#include "vision/golden_testing.h"

namespace dsv4::vision {
namespace {

// Upscales, downscales, one axis only, to 1 pixel and to extreme aspect ratios (the manifest's "resizes").
// Tolerance: none (SHA-256 equality): the arithmetic is integer after identically computed doubles.
TEST(VisionResample, MatchesPillowBicubicExactly) {
  const auto& cases = testing::manifest()["resizes"];
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    const std::string src = c["source"];
    const int w = c["width"], h = c["height"];
    SCOPED_TRACE(src + " -> " + std::to_string(w) + "x" + std::to_string(h));
    StatusOr<Image> im = decode_image(testing::golden_image(src), "image/png");
    ASSERT_TRUE(im.ok()) << im.status().to_string();
    const Image out = resize_bicubic(*im, w, h);
    ASSERT_EQ(out.width, w);
    ASSERT_EQ(out.height, h);
    EXPECT_EQ(testing::sha256_of(out.rgb), c["rgb_sha256"].get<std::string>());
  }
}

// The kernel's defining values (Keys' cubic with a = -0.5): 1 at 0, 0 at the integers, 0 past the support,
// -0.0625 at 1.5, 0.5625 at 0.5.
TEST(VisionResample, KernelValues) {
  EXPECT_EQ(bicubic_kernel(0.0), 1.0);
  EXPECT_EQ(bicubic_kernel(1.0), 0.0);
  EXPECT_EQ(bicubic_kernel(-2.0), 0.0);
  EXPECT_EQ(bicubic_kernel(2.5), 0.0);
  EXPECT_EQ(bicubic_kernel(0.5), 0.5625);
  EXPECT_EQ(bicubic_kernel(-1.5), -0.0625);
}

}  // namespace
}  // namespace dsv4::vision
