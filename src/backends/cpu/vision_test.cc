// The oracle's vision tower and aligner: 2-D RoPE pairing and the aligner's unfold order against formulas
// written from model-spec.md §3.10, ref32 against ref64, images independent of each other, bad input refused.
#include "backends/cpu/vision.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <tuple>

#include "backends/cpu/gate.h"
#include "backends/cpu/vision_ops.h"
#include "backends/cpu/vision_testing.h"
#include "core/sha256.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/vision_testing.h"

namespace dsv4::cpu {
namespace {

using family::Preset;

// Values in [-1, 1) from a 32-bit LCG (Numerical Recipes constants), rounded to bf16.
std::vector<float> lcg_values(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t s = seed;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = round_bf16(static_cast<float>((s >> 8) / 8388608.0 - 1.0));
  }
  return v;
}

ImagePatches test_image(const family::Config& c, int64_t gh, int64_t gw, uint32_t seed) {
  const int64_t p = c.vision->patch_size;
  return {lcg_values(gh * gw * 3 * p * p, seed), gh, gw};
}

// ||a - b|| / ||b|| (the gate's pooled NRMS).
double nrms(const std::vector<float>& a, const std::vector<float>& b) {
  gate::Distance d;
  d.add(a, b, static_cast<int64_t>(b.size()));
  return d.nrms();
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

using Tower = family::vision_testing::SyntheticVision;
Tower tower(Preset p, uint64_t seed) {
  auto t = family::vision_testing::synthetic_vision(p, seed);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(*t) : Tower{};
}

// ---- 2-D RoPE (model-spec.md §3.10) ----

// The rotation written from the spec: inv_freq_k = 10000^(-2k/32), angle i = (i < 16 ? row : col) ·
// inv_freq_{i mod 16}, element i rotated with element i + 32. The oracle (fp32 table, double products,
// one bf16 rounding) is within half a bf16 ulp (2^-8 relative) of the exact value, plus 1e-5 for the fp32
// frequencies, angles and cos/sin of the table (|angle| < 8 here, fp32 error < 1e-6).
TEST(VisionRope, PairsElementIWithIPlus32RowAnglesThenColumnAngles) {
  const int64_t gh = 5, gw = 7, row = 3, col = 5, p = row * gw + col;
  const vision::Rope2d t = vision::rope_2d_table(gh, gw, 10000.0);
  const std::vector<float> x0 = lcg_values(64, 11);
  std::vector<float> x = x0;
  vision::rope_2d_head<double>(x.data(), &t.cos[p * 32], &t.sin[p * 32]);
  for (int i = 0; i < 32; ++i) {
    const long double f = std::pow(10000.0L, -2.0L * (i % 16) / 32.0L);
    const long double a = (i < 16 ? row : col) * f;
    const long double lo = x0[i] * std::cos(a) - x0[i + 32] * std::sin(a);
    const long double hi = x0[i + 32] * std::cos(a) + x0[i] * std::sin(a);
    EXPECT_LE(std::fabs(x[i] - lo), std::ldexp(std::fabs(lo), -8) + 1e-5) << "element " << i;
    EXPECT_LE(std::fabs(x[i + 32] - hi), std::ldexp(std::fabs(hi), -8) + 1e-5) << "element " << i + 32;
  }
}

// A one-hot head shows where each element goes: e_3 (a row angle, k = 3) lands on elements 3 and 35 as
// (cos, sin) of row·10000^(-3/16); e_20 (a column angle, k = 4) on 20 and 52 as those of col·10000^(-4/16).
TEST(VisionRope, OneHotElementsLandOnTheirPair) {
  const int64_t gh = 4, gw = 6, row = 2, col = 5, p = row * gw + col;
  const vision::Rope2d t = vision::rope_2d_table(gh, gw, 10000.0);
  for (const auto& [i, pos, k] : {std::tuple{3, row, 3}, std::tuple{20, col, 4}}) {
    std::vector<float> x(64, 0.0f);
    x[i] = 1.0f;
    vision::rope_2d_head<double>(x.data(), &t.cos[p * 32], &t.sin[p * 32]);
    const double a = pos * std::pow(10000.0, -k / 16.0);
    for (int e = 0; e < 64; ++e) {
      const double want = e == i ? std::cos(a) : e == i + 32 ? std::sin(a) : 0.0;
      EXPECT_NEAR(x[e], want, std::ldexp(std::fabs(want), -8) + 1e-6) << "one-hot " << i << ", element " << e;
    }
  }
}

// ---- aligner unfold (model-spec.md §3.10) ----

// A 4 x 5 grid of V = 2 channels, r = 3: blocks 2 x 2 over the grid padded to 6 x 6, feature c·9 + 3·kh + kw.
// Element (i, j, c) holds 1 + 100·c + 10·i + j so every value names its source.
TEST(VisionAligner, UnfoldOrderAndZeroPadding) {
  const int64_t gh = 4, gw = 5, V = 2;
  std::vector<float> x(gh * gw * V);
  for (int64_t i = 0; i < gh; ++i)
    for (int64_t j = 0; j < gw; ++j)
      for (int64_t c = 0; c < V; ++c) x[(i * gw + j) * V + c] = static_cast<float>(1 + 100 * c + 10 * i + j);
  const Vec u = vision::unfold_blocks(x.data(), gh, gw, V, 3);
  ASSERT_EQ(u.size(), 4u * 18u);
  // Written out by hand: block (0, 1) is columns 3..5; c = 1, kh = 2, kw = 0 is feature 15 = source (2, 3, 1).
  EXPECT_EQ(u[1 * 18 + 15], 124.0f);
  // Block (0, 0), c = 0, kh = 0, kw = 1: feature 1 = source (0, 1, 0).
  EXPECT_EQ(u[0 * 18 + 1], 2.0f);
  // Block (1, 0) starts at row 3: c = 0, kh = 0, kw = 2: feature 2 = source (3, 2, 0).
  EXPECT_EQ(u[2 * 18 + 2], 33.0f);
  // Block (1, 1): kh = 1 is row 4 (padding), kw = 2 is column 5 (padding); kh = 0, kw = 1 is source (3, 4, 1).
  EXPECT_EQ(u[3 * 18 + 9 + 3 + 0], 0.0f);
  EXPECT_EQ(u[3 * 18 + 0 + 0 + 2], 0.0f);
  EXPECT_EQ(u[3 * 18 + 9 + 0 + 1], 135.0f);
  // Every source element scattered to its place from the spec's formula; everything else zero.
  Vec want(u.size(), 0.0f);
  for (int64_t i = 0; i < gh; ++i)
    for (int64_t j = 0; j < gw; ++j)
      for (int64_t c = 0; c < V; ++c)
        want[((i / 3) * 2 + j / 3) * 18 + c * 9 + (i % 3) * 3 + j % 3] = x[(i * gw + j) * V + c];
  EXPECT_EQ(u, want);
}

// ---- the whole tower ----

// The C++ port of the harness's test images gives the bytes vision_ref.py (numpy) wrote: sha256 of the f32
// patches of images 0 (seed 1, 4 x 7) and 3 (seed 4, 12 x 12) from its images.json.
TEST(VisionTower, TestImagesMatchTheHarness) {
  const auto sha = [](const std::vector<float>& v) {
    return sha256_hex({reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)});
  };
  EXPECT_EQ(sha(vision_testing::gradient_image_patches(1, 4, 7, 14)),
            "a7c14fc33004152cfcb68e089ad28903982b403d7c214bf579e7be2bfae0e55d");
  EXPECT_EQ(sha(vision_testing::gradient_image_patches(4, 12, 12, 14)),
            "3bbe56b67bc0f0bd2b7d6d0d78c34d4db4f520a565f705d65c5d0480d41c4b94");
}

// ref32 and ref64 round to bf16 at the same points, so they part only where a float-vs-double accumulation
// difference (about 2^-24 relative) moves a value across a bf16 rounding boundary (2^-8 relative); the
// bidirectional attention spreads each such flip to most of the image within a block or two, each element then
// off by about one bf16 ulp (measured: up to 7e-3 on the small preset's 12x12 test image of
// tests/reference/vision). Bound 2^-6 (1.6e-2): four bf16 ulps RMS.
TEST(VisionTower, Ref32AgreesWithRef64) {
  ThreadPool pool(2);
  for (Preset p : {Preset::tiny, Preset::small}) {
    const Tower t = tower(p, 1);  // the weights of `dsv4 synth --seed 1`
    const ImagePatches img{vision_testing::gradient_image_patches(4, 12, 12, 14), 12, 12};
    std::map<std::string, std::vector<float>> got[2];
    for (int k = 0; k < 2; ++k) {
      VisionOptions o;
      o.precision = k ? Precision::ref64 : Precision::ref32;
      o.probe = [&](const std::string& name, int64_t, int64_t, const std::vector<float>& v) { got[k][name] = v; };
      auto e = encode_image(pool, t.weights, img, o);
      ASSERT_TRUE(e.ok()) << e.status().to_string();
      got[k]["span"] = e->span;
    }
    ASSERT_EQ(got[0].size(), got[1].size());
    for (const auto& [name, v32] : got[0]) {
      const double d = nrms(v32, got[1][name]);
      EXPECT_LE(d, std::ldexp(1.0, -6)) << family::preset_name(p) << " " << name;
      std::printf("%s %-16s NRMS(ref32, ref64) = %.3g\n", std::string(family::preset_name(p)).c_str(), name.c_str(), d);
    }
  }
}

// An image's rows are the same bits whatever else the call holds and however many threads run it.
TEST(VisionTower, ImagesAreIndependentOfEachOtherAndOfThreads) {
  const Tower t = tower(Preset::small, 4);
  const ImagePatches a = test_image(t.config, 4, 5, 1), b = test_image(t.config, 6, 3, 2);
  ThreadPool one(1), three(3);
  auto alone = encode_image(one, t.weights, a);
  auto pair = encode_images(three, t.weights, {b, a});
  ASSERT_TRUE(alone.ok() && pair.ok());
  EXPECT_TRUE(bit_equal((*pair)[1].span, alone->span));
  EXPECT_TRUE(bit_equal((*pair)[1].aligner, alone->aligner));
  auto b_alone = encode_image(three, t.weights, b);
  ASSERT_TRUE(b_alone.ok());
  EXPECT_TRUE(bit_equal((*pair)[0].span, b_alone->span));
}

// The span: image_start, per aligner grid row its aligner rows then image_newline, image_end.
TEST(VisionTower, SpanPlacesDelimitersAroundTheAlignerRows) {
  const Tower t = tower(Preset::tiny, 5);
  ThreadPool pool(2);
  auto e = encode_image(pool, t.weights, test_image(t.config, 4, 7, 3));  // aligner grid 2 x 3
  ASSERT_TRUE(e.ok());
  const int64_t D = t.config.hidden_size;
  ASSERT_EQ(e->grid.h, 2);
  ASSERT_EQ(e->grid.w, 3);
  ASSERT_EQ(static_cast<int64_t>(e->span.size()), 10 * D);
  const auto row = [&](const std::vector<float>& v, int64_t r) { return std::vector<float>(&v[r * D], &v[(r + 1) * D]); };
  EXPECT_EQ(row(e->span, 0), floats(t.weights.image_start));
  EXPECT_EQ(row(e->span, 4), floats(t.weights.image_newline));
  EXPECT_EQ(row(e->span, 8), floats(t.weights.image_newline));
  EXPECT_EQ(row(e->span, 9), floats(t.weights.image_end));
  for (int64_t k = 0; k < 6; ++k) EXPECT_EQ(row(e->span, 1 + k + k / 3), row(e->aligner, k)) << "aligner row " << k;
}

TEST(VisionTower, PatchCountNotMatchingTheGridIsRefused) {
  const Tower t = tower(Preset::tiny, 5);
  ThreadPool pool(1);
  ImagePatches img = test_image(t.config, 3, 3, 1);
  img.grid_w = 4;
  auto e = encode_image(pool, t.weights, img);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(e.status().message().find("3x4 patches needs 7056 values"), std::string::npos) << e.status().message();
}

}  // namespace
}  // namespace dsv4::cpu
