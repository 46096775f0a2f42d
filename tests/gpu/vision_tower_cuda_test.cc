// The CUDA vision tower and aligner (backends/cuda/vision/) on synthetic vision weights of the tiny and small presets:
// every intermediate the oracle probes and the final aligner rows against the CPU oracle's ref32 (NRMS and max-abs),
// an image's rows the same bits alone or beside other images in any position (and through the engine seam), the
// device bytes the memory plan counts, bad input refused, and an image prompt through the CUDA forward giving the
// same logits whether its rows came from one tower call with other images or from a call of its own.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "backends/cpu/image_rows_testing.h"
#include "family/deepseek_v41/synthetic_weights.h"
#include "backends/cpu/vision.h"
#include "backends/cpu/vision_testing.h"
#include "backends/cuda/forward/forward.h"
#include "backends/cuda/model/model.h"
#include "backends/cuda/vision/vision_seam.h"
#include "backends/cuda/vision/vision_tower.h"
#include "core/bf16.h"
#include "engine/image_encoder.h"
#include "engine/vision_memory.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/vision_testing.h"
#include "forward_testing.h"

namespace dsv4::cuda {
namespace {

using family::Preset;

// CUDA against ref32: both round to bf16 at the same points, so they part where a different f32 summation order
// (tensor-core chunks vs the oracle's dot order) moves a value across a bf16 boundary, which attention then spreads
// over the image at about one bf16 ulp (2^-8 relative) per element, as ref32 against ref64 does (measured 7e-3 in
// cpu vision_test): bound 2^-6, four ulps RMS.
constexpr double kNrmsBound = 0x1p-6;
// Max-abs: a few ulps at the largest element (an ulp is 2^-7 of a value in the binade of the maximum): 2^-4 of it.
constexpr double kMaxAbsFraction = 0x1p-4;

using Tower = family::vision_testing::SyntheticVision;
Tower tower(Preset p, uint64_t seed) {
  auto t = family::vision_testing::synthetic_vision(p, seed);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(*t) : Tower{};
}

std::unique_ptr<VisionTowerDevice> device_tower(const Tower& t) {
  auto d = VisionTowerDevice::create(t.weights, 0);
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return d.ok() ? std::move(*d) : nullptr;
}

// One test image: vision_ref.py's gradient pixels (bf16 values) as f32 for the oracle and as bf16 bits.
struct TestImage {
  int64_t gh = 0, gw = 0;
  std::vector<float> values;
  std::vector<uint16_t> bits;
  VisionImage view() const { return VisionImage{bits, gh, gw}; }
  cpu::ImagePatches oracle() const { return cpu::ImagePatches{values, gh, gw}; }
};

TestImage test_image(const family::Config& c, int64_t gh, int64_t gw, uint64_t seed) {
  TestImage im;
  im.gh = gh;
  im.gw = gw;
  im.values = cpu::vision_testing::gradient_image_patches(seed, gh, gw, c.vision->patch_size);
  im.bits.resize(im.values.size());
  f32_to_bf16(im.values, im.bits);
  return im;
}

// Odd grids: a partial aligner block on both sides (4 x 7), whole blocks (12 x 12), several key tiles with a
// partial last one (39 x 39 = 1521 patches), one patch row (1 x 5).
const std::vector<std::pair<int64_t, int64_t>> kGrids = {{4, 7}, {12, 12}, {39, 39}, {1, 5}};

std::vector<TestImage> test_images(const family::Config& c) {
  std::vector<TestImage> v;
  for (size_t i = 0; i < kGrids.size(); ++i) v.push_back(test_image(c, kGrids[i].first, kGrids[i].second, 11 + i));
  return v;
}

bool same_bits(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 2) == 0;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b, double* ref_max) {
  double m = 0, r = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
    r = std::max(r, std::fabs(static_cast<double>(b[i])));
  }
  *ref_max = r;
  return a.size() == b.size() ? m : INFINITY;
}

// Every probe of every image, and the final aligner rows, against the oracle's ref32 (ref64 printed beside it).
TEST(CudaVisionTower, MatchesTheOracleAtEveryProbe) {
  ThreadPool pool(std::max(2u, std::thread::hardware_concurrency()));
  for (Preset p : {Preset::tiny, Preset::small}) {
    const std::string preset(family::preset_name(p));
    const Tower t = tower(p, 1);
    auto dev = device_tower(t);
    ASSERT_TRUE(dev);
    const std::vector<TestImage> images = test_images(t.config);
    std::vector<VisionImage> views;
    for (const TestImage& im : images) views.push_back(im.view());
    std::map<std::pair<size_t, std::string>, std::vector<float>> got;
    auto rows = dev->encode(views, [&](const std::string& name, size_t image, int64_t, int64_t,
                                       const std::vector<float>& v) { got[{image, name}] = v; });
    ASSERT_TRUE(rows.ok()) << rows.status().to_string();
    ASSERT_EQ(rows->size(), images.size());
    for (size_t i = 0; i < images.size(); ++i) {
      std::map<std::string, std::vector<float>> ref[2];
      std::vector<std::string> order;
      for (int k = 0; k < 2; ++k) {
        cpu::VisionOptions o;
        o.precision = k ? cpu::Precision::ref64 : cpu::Precision::ref32;
        o.probe = [&](const std::string& name, int64_t, int64_t, const std::vector<float>& v) {
          ref[k][name] = v;
          if (k == 0) order.push_back(name);
        };
        auto e = cpu::encode_image(pool, t.weights, images[i].oracle(), o);
        ASSERT_TRUE(e.ok()) << e.status().to_string();
      }
      // The returned rows are the "aligner" probe's bits.
      std::vector<float> final_rows((*rows)[i].size());
      bf16_to_f32((*rows)[i], final_rows);
      got[std::pair<size_t, std::string>(i, "rows")] = final_rows;
      ref[0]["rows"] = ref[0]["aligner"];
      ref[1]["rows"] = ref[1]["aligner"];
      order.push_back("rows");
      std::printf("%s image %zu (%lldx%lld patches)\n%-16s %12s %12s %12s %17s\n", preset.c_str(), i,
                  static_cast<long long>(images[i].gh), static_cast<long long>(images[i].gw), "probe",
                  "NRMS(cuda,32)", "maxabs", "max|ref32|", "NRMS(ref32,ref64)");
      for (const std::string& name : order) {
        const auto it = got.find({i, name});
        ASSERT_TRUE(it != got.end()) << preset << " image " << i << ": the CUDA tower gave no probe " << name;
        const std::vector<float>& a = it->second;
        const std::vector<float>& r = ref[0][name];
        ASSERT_EQ(a.size(), r.size()) << preset << " image " << i << " " << name;
        double ref_max = 0;
        const double d = gpu_testing::nrms(a, r), m = max_abs_diff(a, r, &ref_max);
        const double floor = gpu_testing::nrms(r, ref[1][name]);
        std::printf("%-16s %12.3e %12.3e %12.3e %17.3e\n", name.c_str(), d, m, ref_max, floor);
        EXPECT_LE(d, kNrmsBound) << preset << " image " << i << " " << name << ": NRMS(cuda, ref32) " << d
                                 << " (ref32 vs ref64: " << floor << ")";
        EXPECT_LE(m, kMaxAbsFraction * ref_max)
            << preset << " image " << i << " " << name << ": max-abs " << m << " of max " << ref_max;
      }
      EXPECT_TRUE((got[{i, "aligner"}] == final_rows)) << "the aligner probe differs from the returned rows";
    }
  }
}

// An image's rows are the same bits alone, beside two others in each position, and through the engine's seam.
TEST(CudaVisionTower, ImagesAreBatchInvariant) {
  for (Preset p : {Preset::tiny, Preset::small}) {
    const std::string preset(family::preset_name(p));
    const Tower t = tower(p, 4);
    std::shared_ptr<VisionTowerDevice> dev = device_tower(t);
    ASSERT_TRUE(dev);
    const TestImage a = test_image(t.config, 12, 12, 1), b = test_image(t.config, 4, 7, 2),
                    c = test_image(t.config, 39, 39, 3);
    std::vector<std::vector<uint16_t>> alone;
    for (const TestImage* im : {&a, &b, &c}) {
      const VisionImage v = im->view();
      auto r = dev->encode(std::span(&v, 1));
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      alone.push_back((*r)[0]);
    }
    // Every order of the three: each image's rows equal its rows alone.
    const std::vector<std::vector<int>> orders = {{0, 1, 2}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}, {0, 2, 1}};
    const TestImage* all[3] = {&a, &b, &c};
    for (const auto& order : orders) {
      std::vector<VisionImage> views;
      for (int k : order) views.push_back(all[k]->view());
      auto r = dev->encode(views);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      for (size_t pos = 0; pos < order.size(); ++pos)
        EXPECT_TRUE(same_bits((*r)[pos], alone[order[pos]]))
            << preset << ": image " << order[pos] << " at position " << pos << " of order " << order[0] << order[1]
            << order[2] << " differs from its rows alone";
    }
    // The same image twice in one call, and a repeated call: the same bits.
    std::vector<VisionImage> twice = {a.view(), a.view()};
    auto r2 = dev->encode(twice);
    ASSERT_TRUE(r2.ok());
    EXPECT_TRUE(same_bits((*r2)[0], alone[0]) && same_bits((*r2)[1], alone[0])) << preset << ": twice in a call";
    // Through the engine seam (one image per call).
    auto seam = vision_tower_seam(dev);
    vision::PixelPatches pp;
    pp.grid_h = 4;
    pp.grid_w = 7;
    pp.patches = b.bits;
    auto s = seam->aligner_rows(pp);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_TRUE(same_bits(*s, alone[1])) << preset << ": the seam's rows differ";
  }
}

// The device bytes: the weights as engine::vision_weight_bytes counts them, the scratch as vision_scratch lays it
// out for the largest call so far; printed for the release config.
TEST(CudaVisionTower, DeviceBytesAreThePlannedOnes) {
  const Tower t = tower(Preset::small, 2);
  auto dev = device_tower(t);
  ASSERT_TRUE(dev);
  const int64_t D = t.config.hidden_size;
  EXPECT_EQ(dev->weight_bytes(), engine::vision_weight_bytes(*t.config.vision, D));
  const TestImage a = test_image(t.config, 39, 39, 1);
  const VisionImage v = a.view();
  ASSERT_TRUE(dev->encode(std::span(&v, 1)).ok());
  EXPECT_EQ(dev->scratch_bytes(), engine::vision_scratch(*t.config.vision, D, 39 * 39, 13 * 13).total);
  const family::Config full = family::preset_config(Preset::full, family::Variant::v41);
  std::printf("release config: vision weights %.1f MiB, one largest image's scratch %.1f MiB\n",
              engine::vision_weight_bytes(*full.vision, full.hidden_size) / 1048576.0,
              (engine::vision_device_bytes(*full.vision, full.hidden_size) -
               engine::vision_weight_bytes(*full.vision, full.hidden_size)) /
                  1048576.0);
}

TEST(CudaVisionTower, BadImagesAreRefused) {
  const Tower t = tower(Preset::tiny, 2);
  auto dev = device_tower(t);
  ASSERT_TRUE(dev);
  TestImage a = test_image(t.config, 3, 3, 1);
  VisionImage v = a.view();
  v.grid_w = 4;
  auto r = dev->encode(std::span(&v, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::invalid_argument) << r.status().to_string();
  v.grid_w = 0;
  EXPECT_FALSE(dev->encode(std::span(&v, 1)).ok());
}

// A VisionTower that hands out given rows in turn (the rows of one earlier tower call).
class GivenRows final : public engine::VisionTower {
 public:
  explicit GivenRows(std::vector<std::vector<uint16_t>> rows) : rows_(std::move(rows)) {}
  StatusOr<std::vector<uint16_t>> aligner_rows(const vision::PixelPatches&) override {
    if (next_ >= rows_.size()) return error(StatusCode::internal, "no more rows");
    return rows_[next_++];
  }

 private:
  std::vector<std::vector<uint16_t>> rows_;
  size_t next_ = 0;
};

// An image prompt through the CUDA forward (the preset of DSV4_GPU_PRESET): two image spans whose rows come from
// one tower call holding both images and a third, or from a call per image through the seam; the same logits.
TEST(CudaVisionTower, ImagePromptLogitsAreTheSameFromOneCallOrSeparateCalls) {
  auto preset = family::parse_preset(gpu_testing::preset_name());
  ASSERT_TRUE(preset.ok()) << preset.status().to_string();
  const family::Config c = family::preset_config(*preset, family::Variant::v41);
  const std::shared_ptr<const family::Model> model = family::synthetic_weights(c, 1, true);
  auto store = family::vision_testing::synthetic_vision_store(c, 3);
  ASSERT_TRUE(store);
  auto vw = family::bind_vision_weights(c, *store);
  ASSERT_TRUE(vw.ok()) << vw.status().to_string();
  auto made = VisionTowerDevice::create(*vw, 0);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  std::shared_ptr<VisionTowerDevice> dev = std::move(*made);
  const int64_t D = model->plan.dim;
  ASSERT_EQ(dev->hidden(), D);
  engine::ImageDelimiters delims;
  for (auto [view, out] : {std::pair{&vw->image_start, &delims.start}, std::pair{&vw->image_newline, &delims.newline},
                           std::pair{&vw->image_end, &delims.end}}) {
    out->resize(static_cast<size_t>(D));
    std::memcpy(out->data(), view->data, static_cast<size_t>(D) * 2);
  }
  const int32_t r = c.vision->downsample_ratio;
  const TestImage first = test_image(c, 4, 7, 21), second = test_image(c, 12, 12, 22), other = test_image(c, 39, 39, 23);
  auto patches = [&](const TestImage& im) {
    vision::PixelPatches pp;
    pp.grid_h = static_cast<int32_t>(im.gh);
    pp.grid_w = static_cast<int32_t>(im.gw);
    pp.llm_h = static_cast<int32_t>((im.gh + r - 1) / r);
    pp.llm_w = static_cast<int32_t>((im.gw + r - 1) / r);
    pp.n_tokens = pp.llm_h * (pp.llm_w + 1) + 2;
    pp.patch_dim = 3 * c.vision->patch_size * c.vision->patch_size;
    pp.patches = im.bits;
    return pp;
  };
  // Spans from one call holding the other image between them, and from a call each (the seam).
  std::vector<VisionImage> views = {first.view(), other.view(), second.view()};
  auto joint = dev->encode(views);
  ASSERT_TRUE(joint.ok()) << joint.status().to_string();
  auto one = engine::ImageEncoder::create(delims, std::make_unique<GivenRows>(std::vector<std::vector<uint16_t>>{
                                                      (*joint)[0], (*joint)[2]}), D);
  auto each = engine::ImageEncoder::create(delims, vision_tower_seam(dev), D);
  ASSERT_TRUE(one.ok() && each.ok());
  std::vector<engine::ImageSpanRows> spans[2];
  for (const TestImage* im : {&first, &second}) {
    auto a = (*one)->encode(patches(*im));
    auto b = (*each)->encode(patches(*im));
    ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string() << " " << b.status().to_string();
    spans[0].push_back(std::move(*a));
    spans[1].push_back(std::move(*b));
  }
  for (size_t k = 0; k < 2; ++k) EXPECT_TRUE(same_bits(spans[0][k].values, spans[1][k].values)) << "span " << k;
  // The prompt: text, the first span, text, the second span, text; every row's logits.
  const int64_t a0 = 5, a1 = a0 + spans[0][0].rows + 7, total = a1 + spans[0][1].rows + 9;
  std::vector<int32_t> tokens = gpu_testing::prompt(static_cast<int>(total), 3);
  for (int64_t i = a0; i < a0 + spans[0][0].rows; ++i) tokens[i] = 129264;
  for (int64_t i = a1; i < a1 + spans[0][1].rows; ++i) tokens[i] = 129264;
  auto up = ModelDevice::upload(model, ModelDeviceOptions{});
  ASSERT_TRUE(up.ok()) << up.status().to_string();
  ForwardOptions fo;
  fo.max_context = 1024;
  fo.max_rollback = 16;
  fo.max_call_rows = 512;
  auto f = Forward::create(std::shared_ptr<const ModelDevice>(std::move(*up)), fo);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  std::vector<float> logits[2];
  for (int k = 0; k < 2; ++k) {
    auto stream = (*f)->open_stream();
    ASSERT_TRUE(stream.ok());
    engine::Piece piece{*stream, tokens, gpu_testing::all_rows(static_cast<int>(total)), {}};
    piece.embeds.push_back(engine::EmbedRows{a0, spans[k][0].rows, spans[k][0].values, true});
    piece.embeds.push_back(engine::EmbedRows{a1, spans[k][1].rows, spans[k][1].values, true});
    auto out = (*f)->forward({piece});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    logits[k] = (*out)[0].logits;
    ASSERT_TRUE((*f)->close_stream(*stream).ok());
  }
  ASSERT_EQ(logits[0].size(), static_cast<size_t>(total * c.vocab_size));
  EXPECT_TRUE(logits[0] == logits[1]) << "logits differ between rows from one tower call and from separate calls";
}

}  // namespace
}  // namespace dsv4::cuda
