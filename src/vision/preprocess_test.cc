// Preprocessing against Pillow + numpy (make_goldens.py): canvas and bf16 patches of every golden image
// under the release, max_wh_ratio and tiny configs; the span layout against the reference's formula.
#include "vision/preprocess.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/bf16.h"
#include "vision/decode.h"
#include "vision/golden_testing.h"
#include "vision/sniff.h"
#include "family/deepseek_v41/image_span.h"

namespace dsv4::vision {
namespace {

StatusOr<Image> decode_golden(const std::string& name) {
  return decode_image(testing::golden_image(name), "");
}

// Release and max_wh_ratio configs: the canvas (u8) and the patch tensor (bf16 bits) equal Pillow's and
// numpy's by SHA-256. Tolerance: none, since every step is integer or the same fp32 operations.
TEST(VisionPreprocess, MatchesPillowAndNumpyExactly) {
  for (const char* cname : {"release", "wh_ratio_2"}) {
    const family::VisionConfig cfg = testing::golden_config(cname);
    const auto& cases = testing::manifest()["preprocess"][cname];
    ASSERT_GE(cases.size(), 3u);
    for (const auto& [name, g] : cases.items()) {
      SCOPED_TRACE(std::string(cname) + " " + name);
      StatusOr<Image> im = decode_golden(name);
      ASSERT_TRUE(im.ok()) << im.status().to_string();
      StatusOr<PixelPatches> pp = preprocess(*im, cfg);
      ASSERT_TRUE(pp.ok()) << pp.status().to_string();
      const auto& pl = g["plan"];
      EXPECT_EQ(pp->grid_h, pl["grid_h"].get<int>());
      EXPECT_EQ(pp->grid_w, pl["grid_w"].get<int>());
      EXPECT_EQ(pp->llm_h, pl["llm_h"].get<int>());
      EXPECT_EQ(pp->llm_w, pl["llm_w"].get<int>());
      EXPECT_EQ(pp->n_tokens, pl["n_tokens"].get<int>());
      EXPECT_EQ(pp->patch_dim, 3 * 14 * 14);
      ASSERT_EQ(pp->patches.size(), static_cast<size_t>(pp->grid_h) * pp->grid_w * pp->patch_dim);
      EXPECT_EQ(testing::sha256_of(render_canvas(*im, pp->plan).rgb), g["canvas_sha256"].get<std::string>());
      EXPECT_EQ(testing::sha256_of(pp->patches), g["patches_sha256"].get<std::string>());
    }
  }
}

// Tiny config (patch 2, ratio 2, at most 20 tokens): the whole expected tensors are stored; compared as
// values by max-abs. Tolerance 0: see above. Images whose resized picture would be 0 pixels high are
// refused, as Pillow refuses that resize.
TEST(VisionPreprocess, TinyConfigWholeTensors) {
  const family::VisionConfig cfg = testing::golden_config("tiny");
  const auto& cases = testing::manifest()["preprocess"]["tiny"];
  int refused = 0;
  for (const auto& [name, g] : cases.items()) {
    SCOPED_TRACE(name);
    StatusOr<Image> im = decode_golden(name);
    ASSERT_TRUE(im.ok());
    StatusOr<PixelPatches> pp = preprocess(*im, cfg);
    if (g.contains("error")) {
      ASSERT_FALSE(pp.ok());
      EXPECT_NE(pp.status().message().find("aspect ratio too extreme"), std::string::npos) << pp.status().message();
      ++refused;
      continue;
    }
    ASSERT_TRUE(pp.ok()) << pp.status().to_string();
    const std::vector<uint16_t> want = testing::manifest()["tiny_patches"][name].get<std::vector<uint16_t>>();
    ASSERT_EQ(pp->patches.size(), want.size());
    float max_abs = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(bf16_to_f32(pp->patches[i]) - bf16_to_f32(want[i])));
    }
    EXPECT_EQ(max_abs, 0.0f);
  }
  EXPECT_EQ(refused, 4);
}

// The 256 normalised values: (v / 255 - 0.5) / 0.5 lies in [-1, 1], is exact at 0 and 255, and bf16 keeps
// 8 significant bits, so it is within 2^-8 relative of the double-precision value.
TEST(VisionPreprocess, NormalisedSamples) {
  EXPECT_EQ(bf16_to_f32(normalize_sample(0)), -1.0f);
  EXPECT_EQ(bf16_to_f32(normalize_sample(255)), 1.0f);
  for (int v = 0; v < 256; ++v) {
    const double exact = (v / 255.0 - 0.5) / 0.5;
    EXPECT_LE(std::fabs(bf16_to_f32(normalize_sample(static_cast<uint8_t>(v))) - exact), std::fabs(exact) / 256 + 1e-7) << v;
  }
}

// Patch layout on a canvas whose every sample is distinct by position: patch (gy, gx), feature
// c * p * p + ky * p + kx is pixel (gy * p + ky, gx * p + kx), channel c.
TEST(VisionPreprocess, PatchLayout) {
  const int p = 3;
  Image canvas;
  canvas.width = 2 * p, canvas.height = 3 * p;
  canvas.rgb.resize(static_cast<size_t>(canvas.width) * canvas.height * 3);
  for (size_t i = 0; i < canvas.rgb.size(); ++i) canvas.rgb[i] = static_cast<uint8_t>(i % 251);
  const std::vector<uint16_t> patches = patchify(canvas, p);
  ASSERT_EQ(patches.size(), static_cast<size_t>(6) * 3 * p * p);
  for (int gy = 0; gy < 3; ++gy)
    for (int gx = 0; gx < 2; ++gx)
      for (int c = 0; c < 3; ++c)
        for (int ky = 0; ky < p; ++ky)
          for (int kx = 0; kx < p; ++kx) {
            const size_t at = (static_cast<size_t>(gy) * 2 + gx) * 3 * p * p + (c * p + ky) * p + kx;
            EXPECT_EQ(patches[at], normalize_sample(canvas.at(gy * p + ky, gx * p + kx, c)));
          }
}

// The plan's span length is the family's span of its aligner grid (whose layout family tests check).
TEST(VisionPlan, SpanLengthIsTheFamilySpan) {
  StatusOr<ImagePlan> p = plan_image(640, 480, family::VisionConfig{});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->n_tokens, family::image_span_rows(family::AlignerGrid{p->llm_h, p->llm_w}));
  EXPECT_EQ(p->n_tokens, int64_t{p->llm_h} * (p->llm_w + 1) + 2);
}

}  // namespace
}  // namespace dsv4::vision
