// The oracle's vision tower against outputs of DeepSeek's reference vision.py, when they are committed: the golden
// files tests/reference/vision/run_device.sh writes (tests/data/vision/<preset>/: PROVENANCE.json, img{i}_*.npy).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "backends/cpu/gate.h"
#include "backends/cpu/vision.h"
#include "backends/cpu/vision_testing.h"
#include "core/sha256.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/vision_testing.h"

namespace dsv4::cpu {
namespace {

// Two faithful bf16 implementations part by rounding flips that the attention spreads over the image, about one
// bf16 ulp (2^-8) RMS (ref32 vs ref64: up to 7e-3); 2^-6 allows four ulps, a structural error is far above.
constexpr double kBound = 1.0 / 64;

void check_preset(const std::string& preset_name) {
  const std::filesystem::path dir = std::filesystem::path(DSV4_SOURCE_DIR) / "tests/data/vision" / preset_name;
  if (!std::filesystem::exists(dir / "PROVENANCE.json"))
    GTEST_SKIP() << dir.string() << " has no golden files yet (tests/reference/vision/README.md makes them)";
  std::ifstream f(dir / "PROVENANCE.json");
  const nlohmann::json prov = nlohmann::json::parse(f);
  const auto preset = family::parse_preset(prov.at("checkpoint").at("preset").get<std::string>());
  ASSERT_TRUE(preset.ok());
  const family::Config c = family::preset_config(*preset, family::Variant::v41);
  // The vision tensors dsv4 synth writes for that seed (the checkpoint the reference ran on).
  auto store = family::vision_testing::synthetic_vision_store(c, prov.at("checkpoint").at("seed").get<uint64_t>());
  ASSERT_TRUE(store);
  auto w = family::bind_vision_weights(c, *store);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ThreadPool pool(2);
  int i = 0;
  for (const auto& im : prov.at("images")) {
    ImagePatches img;
    img.grid_h = im.at("grid_h").get<int64_t>();
    img.grid_w = im.at("grid_w").get<int64_t>();
    img.patches = vision_testing::gradient_image_patches(im.at("seed").get<uint64_t>(), img.grid_h, img.grid_w,
                                                         c.vision->patch_size);
    ASSERT_EQ(sha256_hex({reinterpret_cast<const uint8_t*>(img.patches.data()), img.patches.size() * 4}),
              im.at("sha256").get<std::string>())
        << "image " << i << ": the patches differ from those the reference ran on";
    std::map<std::string, std::vector<float>> got;
    VisionOptions o;
    o.probe = [&](const std::string& name, int64_t, int64_t, const std::vector<float>& v) { got[name] = v; };
    auto e = encode_image(pool, *w, img, o);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    got["span"] = e->span;
    for (const auto& name : im.at("outputs")) {
      int64_t rows = 0, cols = 0;
      const std::string file = (dir / ("img" + std::to_string(i) + "_" + name.get<std::string>() + ".npy")).string();
      auto ref = vision_testing::read_npy_f32(file, rows, cols);
      ASSERT_TRUE(ref.ok()) << ref.status().to_string();
      const std::vector<float>& v = got[name.get<std::string>()];
      ASSERT_EQ(v.size(), ref->size()) << file;
      gate::Distance d;
      d.add(v, *ref, cols);
      EXPECT_LE(d.nrms(), kBound) << preset_name << " image " << i << " " << name;
    }
    ++i;
  }
}

TEST(VisionGolden, TinyMatchesTheReference) { check_preset("tiny"); }
TEST(VisionGolden, SmallMatchesTheReference) { check_preset("small"); }

}  // namespace
}  // namespace dsv4::cpu
