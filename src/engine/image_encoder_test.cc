// The image seam: the span's rows in the reference's order (delimiters from the learned vectors, the tower's rows at
// the image positions row-major), refusals, and the delimiters read from a checkpoint's weights.
#include "engine/image_encoder.h"

#include <gtest/gtest.h>

#include "core/bf16.h"
#include "engine/image_encoder_testing.h"

namespace dsv4::engine {
namespace {

constexpr int64_t kDim = 4;

// A tower whose row k is the value k + 1 everywhere; it counts its calls and can fail or return too few rows.
class CountingTower final : public VisionTower {
 public:
  StatusOr<std::vector<uint16_t>> aligner_rows(const vision::PixelPatches& p) override {
    if (fail) return error(StatusCode::internal, "out of device memory");
    std::vector<uint16_t> out;
    const int64_t cells = int64_t{p.llm_h} * p.llm_w - (short_by ? 1 : 0);
    for (int64_t k = 0; k < cells; ++k) out.insert(out.end(), kDim, f32_to_bf16(static_cast<float>(k + 1)));
    return out;
  }
  bool fail = false, short_by = false;
};

ImageDelimiters delimiters() {
  return {std::vector<uint16_t>(kDim, f32_to_bf16(-1.0f)), std::vector<uint16_t>(kDim, f32_to_bf16(-2.0f)),
          std::vector<uint16_t>(kDim, f32_to_bf16(-3.0f))};
}

// A 2 x 3 aligner grid (ViT grid 5 x 7, ratio 3).
vision::PixelPatches patches() {
  vision::PixelPatches p;
  p.grid_h = 5, p.grid_w = 7, p.llm_h = 2, p.llm_w = 3, p.patch_dim = 2;
  p.n_tokens = 2 * (3 + 1) + 2;
  p.patches.assign(5 * 7 * 2, 0);
  return p;
}

TEST(ImageEncoder, SpanRowsInReferenceOrder) {
  auto tower = std::make_unique<CountingTower>();
  auto e = ImageEncoder::create(delimiters(), std::move(tower), kDim);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  auto rows = (*e)->encode(patches());
  ASSERT_TRUE(rows.ok()) << rows.status().to_string();
  ASSERT_EQ(rows->rows, 10);
  ASSERT_EQ(rows->values.size(), 10u * kDim);
  // start, image 0 1 2, newline, image 3 4 5, newline, end.
  const std::vector<float> expected = {-1, 1, 2, 3, -2, 4, 5, 6, -2, -3};
  for (int64_t r = 0; r < 10; ++r)
    for (int64_t i = 0; i < kDim; ++i) EXPECT_EQ(bf16_to_f32(rows->values[r * kDim + i]), expected[r]) << r;
}

TEST(ImageEncoder, Refusals) {
  EXPECT_FALSE(ImageEncoder::create(delimiters(), nullptr, kDim).ok());
  ImageDelimiters narrow = delimiters();
  narrow.newline.pop_back();
  EXPECT_FALSE(ImageEncoder::create(narrow, std::make_unique<CountingTower>(), kDim).ok());

  auto tower = std::make_unique<CountingTower>();
  CountingTower* t = tower.get();
  auto e = std::move(ImageEncoder::create(delimiters(), std::move(tower), kDim)).value();
  vision::PixelPatches bad = patches();
  bad.n_tokens = 9;
  EXPECT_EQ(e->encode(bad).status().code(), StatusCode::invalid_argument);
  t->short_by = true;
  auto short_rows = e->encode(patches());
  EXPECT_EQ(short_rows.status().code(), StatusCode::internal);
  EXPECT_NE(short_rows.status().message().find("returned 20 values for 6 aligner rows"), std::string::npos);
  t->short_by = false;
  t->fail = true;
  auto failed = e->encode(patches());
  EXPECT_EQ(failed.status().message(), "the vision tower: out of device memory");
}

TEST(ImageEncoder, DelimitersFromTheWeights) {
  family::Model m;
  m.plan.dim = kDim;
  EXPECT_EQ(image_delimiters(m).status().code(), StatusCode::not_found);  // no vision_config
  m.config.vision = family::VisionConfig{};
  auto missing = image_delimiters(m);
  EXPECT_EQ(missing.status().code(), StatusCode::not_found);
  EXPECT_NE(missing.status().message().find("image_start"), std::string::npos);
  const std::vector<uint16_t> a = {1, 2, 3, 4}, b = {5, 6, 7, 8}, c = {9, 10, 11, 12};
  auto view = [](const std::vector<uint16_t>& v) { return TensorView{v.data(), DType::bf16, {kDim}, kDim * 2}; };
  m.weights.image_start = view(a);
  m.weights.image_newline = view(b);
  m.weights.image_end = view(c);
  auto d = image_delimiters(m);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->start, a);
  EXPECT_EQ(d->newline, b);
  EXPECT_EQ(d->end, c);
  m.weights.image_end.dtype = DType::f32;
  EXPECT_EQ(image_delimiters(m).status().code(), StatusCode::invalid_argument);
}

TEST(ImageEncoder, TestTowerIsAFunctionOfThePixels) {
  testing::HashTower tower(8, 3);
  vision::PixelPatches p = patches();
  auto a = tower.aligner_rows(p);
  auto again = tower.aligner_rows(p);
  p.patches[7 * 2 * 3 + 1] = 5;  // a patch of block (1, 0)
  auto b = tower.aligner_rows(p);
  ASSERT_TRUE(a.ok() && again.ok() && b.ok());
  EXPECT_EQ(*a, *again);
  EXPECT_EQ(std::vector<uint16_t>(a->begin(), a->begin() + 3 * 8), std::vector<uint16_t>(b->begin(), b->begin() + 3 * 8));
  EXPECT_NE(std::vector<uint16_t>(a->begin() + 3 * 8, a->begin() + 4 * 8),
            std::vector<uint16_t>(b->begin() + 3 * 8, b->begin() + 4 * 8));
}

}  // namespace
}  // namespace dsv4::engine
