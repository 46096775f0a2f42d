// Vision weight binding (views checked against the release table) and the image span layout.
#include "family/deepseek_v41/vision_weights.h"

#include <gtest/gtest.h>

#include "family/deepseek_v41/image_span.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/vision_testing.h"

namespace dsv4::family {
namespace {

Config tiny() { return preset_config(Preset::tiny, Variant::v41); }

TEST(VisionWeights, BindsEveryTensorAsAViewIntoTheStore) {
  const Config c = preset_config(Preset::small, Variant::v41);
  auto store = vision_testing::synthetic_vision_store(c, 7);
  ASSERT_TRUE(store);
  auto w = bind_vision_weights(c, *store);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_EQ(w->blocks.size(), static_cast<size_t>(c.vision->num_hidden_layers));
  // Zero-copy: the views point at the store's own bytes.
  EXPECT_EQ(w->blocks[1].wqkv.weight.data, store->tensor("vision.blocks.1.attn.wqkv.weight")->data);
  EXPECT_EQ(w->aligner_w2_bias.data, store->tensor("aligner.w2.bias")->data);
  EXPECT_EQ(w->image_newline.data, store->tensor("image_newline")->data);
  // Shapes of model-spec.md §5.4 at the preset's widths (V 128, I 256, p 14, r 3, D 512).
  EXPECT_EQ(w->patch_embed.out(), 128);
  EXPECT_EQ(w->patch_embed.in(), 3 * 14 * 14);
  EXPECT_EQ(w->blocks[0].w1.out(), 2 * 256);
  EXPECT_EQ(w->aligner_w1.in(), 128 * 9);
  EXPECT_EQ(w->aligner_w1.out(), 512);
  EXPECT_EQ(w->hidden, 512);
}

TEST(VisionWeights, MissingTensorIsRefusedByName) {
  const Config c = tiny();
  auto store = vision_testing::synthetic_vision_store(c, 1, "vision.blocks.0.attn.wo.bias");
  ASSERT_TRUE(store);
  auto w = bind_vision_weights(c, *store);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::data_loss);
  EXPECT_NE(w.status().message().find("vision.blocks.0.attn.wo.bias: missing"), std::string::npos)
      << w.status().message();
}

TEST(VisionWeights, MisShapedTensorIsRefusedByName) {
  const Config c = tiny();
  auto store = vision_testing::synthetic_vision_store(c, 1, "aligner.w1.bias");
  ASSERT_TRUE(store);
  const int64_t D = c.hidden_size;
  ASSERT_TRUE(store->add("aligner.w1.bias", DType::bf16, {D + 1}, std::vector<uint8_t>(2 * (D + 1))).ok());
  auto w = bind_vision_weights(c, *store);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("aligner.w1.bias: BF16 [257] where the table needs BF16 [256]"),
            std::string::npos)
      << w.status().message();
}

TEST(VisionWeights, ConfigWithoutVisionIsRefused) {
  Config c = tiny();
  auto store = vision_testing::synthetic_vision_store(c, 1);
  c.vision.reset();
  auto w = bind_vision_weights(c, *store);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("no vision tower"), std::string::npos);
}

// The span of an image whose aligner grid is 2 x 3, written out from the layout the reference's
// preprocessing documents: [START] + ([IMAGE] * w + [NEWLINE]) * h + [END].
TEST(ImageSpan, LayoutOfATwoByThreeGrid) {
  using R = ImageRow;
  const AlignerGrid g{2, 3};
  const std::vector<ImageRow> want = {R::start, R::image, R::image, R::image, R::newline,
                                      R::image, R::image, R::image, R::newline, R::end};
  EXPECT_EQ(image_span_layout(g), want);
  EXPECT_EQ(image_span_rows(g), 10);
}

// ceil(patches / 3) per side: 544 px / 14 = 38 patches -> 13 (38 = 3·12 + 2, padded); 39 -> 13; 1 -> 1.
TEST(ImageSpan, AlignerGridRoundsUp) {
  EXPECT_EQ(aligner_grid(38, 39, 3).h, 13);
  EXPECT_EQ(aligner_grid(38, 39, 3).w, 13);
  EXPECT_EQ(aligner_grid(1, 4, 3).h, 1);
  EXPECT_EQ(aligner_grid(1, 4, 3).w, 2);
}

}  // namespace
}  // namespace dsv4::family
