// Resize plans against the rules restated in make_goldens.py (Python floats, Pillow's contain/pad), for the
// released config, a max_wh_ratio config and a tiny one; plus config refusals.
#include "vision/plan.h"

#include <gtest/gtest.h>

#include "vision/golden_testing.h"

namespace dsv4::vision {
namespace {

TEST(VisionPlan, MatchesTheRestatedRules) {
  for (const char* cname : {"release", "wh_ratio_2", "tiny"}) {
    const family::VisionConfig cfg = testing::golden_config(cname);
    const auto& cases = testing::manifest()["plans"][cname];
    ASSERT_GE(cases.size(), 30u);
    for (const auto& c : cases) {
      const int w = c["width"], h = c["height"];
      SCOPED_TRACE(std::string(cname) + " " + std::to_string(w) + "x" + std::to_string(h));
      StatusOr<ImagePlan> p = plan_image(w, h, cfg);
      if (c.contains("error")) {
        ASSERT_FALSE(p.ok());
        EXPECT_NE(p.status().message().find("aspect ratio too extreme"), std::string::npos) << p.status().message();
        continue;
      }
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      EXPECT_EQ(p->canvas_width, c["canvas_width"].get<int>());
      EXPECT_EQ(p->canvas_height, c["canvas_height"].get<int>());
      EXPECT_EQ(p->grid_h, c["grid_h"].get<int>());
      EXPECT_EQ(p->grid_w, c["grid_w"].get<int>());
      EXPECT_EQ(p->llm_h, c["llm_h"].get<int>());
      EXPECT_EQ(p->llm_w, c["llm_w"].get<int>());
      EXPECT_EQ(p->n_tokens, c["n_tokens"].get<int>());
      EXPECT_LE(p->n_tokens, cfg.max_image_tokens);
      EXPECT_EQ(p->fit == Fit::stretch ? "stretch" : "pad", c["fit"].get<std::string>());
      if (c.contains("content_width")) {
        EXPECT_EQ(p->content_width, c["content_width"].get<int>());
        EXPECT_EQ(p->content_height, c["content_height"].get<int>());
      }
      if (c.contains("content_x")) {  // Pillow's own pad offsets, where the stand-in image was small enough
        EXPECT_EQ(p->content_x, c["content_x"].get<int>());
        EXPECT_EQ(p->content_y, c["content_y"].get<int>());
      }
    }
  }
}

// Hand-checked release cases: 544x544 is min_pixels exactly (no upscale): canvas 546 (39 patches), 13 x 13
// tokens + 13 newlines + 2 = 184. 1x1 upscales to 544x544 and plans the same.
TEST(VisionPlan, ReleaseHandChecked) {
  const family::VisionConfig cfg;  // the release defaults
  for (int side : {544, 1}) {
    StatusOr<ImagePlan> p = plan_image(side, side, cfg);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->canvas_width, 546);
    EXPECT_EQ(p->grid_h, 39);
    EXPECT_EQ(p->llm_h, 13);
    EXPECT_EQ(p->n_tokens, 13 * 14 + 2);
  }
}

TEST(VisionPlan, RefusesBadInput) {
  family::VisionConfig cfg;
  EXPECT_FALSE(plan_image(0, 5, cfg).ok());
  cfg.patch_size = 0;
  EXPECT_NE(plan_image(5, 5, cfg).status().message().find("patch_size 0"), std::string::npos);
  cfg = {};
  cfg.max_image_tokens = 3;
  EXPECT_NE(plan_image(5, 5, cfg).status().message().find("max_image_tokens 3 is below 4"), std::string::npos);
  cfg = {};
  cfg.max_wh_ratio = 0.0;
  EXPECT_NE(plan_image(5, 5, cfg).status().message().find("max_wh_ratio"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::vision
