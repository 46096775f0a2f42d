// The oracle's vision tower and aligner against DeepSeek's own reference vision.py: the golden files of
// tests/data/vision_reference/{tiny,small} (README.md there) hold the reference's vit_norm, aligner and span of four
// test images on the `dsv4 synth --preset P --seed 1` checkpoint. The test rebuilds those weights in memory from the
// writer's own source, regenerates the images as tests/reference/vision/vision_ref.py does (both pinned by sha256, so
// a drift in either generator fails here rather than as an NRMS), runs ref32 and ref64 and bounds their NRMS.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cpu/vision.h"
#include "backends/cpu/vision_testing.h"
#include "core/sha256.h"
#include "core/tensor_store.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/synth.h"
#include "family/deepseek_v41/tensors.h"

namespace dsv4::cpu {
namespace {

using family::Preset;

std::string golden_dir(Preset p) {
  return std::string(DSV4_SOURCE_DIR) + "/tests/data/vision_reference/" + std::string(family::preset_name(p));
}

// The digest of the vision tensors (vision.*, aligner.*, image_*) that `dsv4 synth --preset P --seed 1` writes: for
// each, in byte order of its name, the line "<name> <sha256 hex of its stored bytes>\n"; the SHA-256 of those lines.
// Computed from the safetensors files that command wrote (18 tensors tiny, 26 small). A change of the synthetic bytes
// bumps kSynthFormatVersion and also invalidates the golden files: regenerate them (tests/reference/vision/README.md).
constexpr const char* kVisionWeightsDigest[] = {
    "29a76b11f1ec631ea014d8d34fd1f9a5e4ad48dd51ee18b68f4fcbfb27b530e6",  // tiny
    "b35ca21f510be165a216d61f2b91c572653aabac2946761b3fa3ce7d3b2c2c63",  // small
};

std::string sha256_of(const std::vector<float>& v) {
  return sha256_hex({reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)});
}

struct Tower {
  family::Config config;
  std::shared_ptr<MemoryTensors> store;
  family::VisionWeights weights;
  std::string digest;
};

// The vision tensors of `dsv4 synth --preset p --seed seed` (default --variant v41, no --layers): the config that
// command builds and the bytes of family::synthetic_tensor_source, the source write_synthetic_checkpoint streams into
// the shards, each tensor filled whole.
Tower command_weights(Preset p, uint64_t seed) {
  Tower t;
  t.config = family::preset_config(p, family::Variant::v41);
  t.store = std::make_shared<MemoryTensors>("dsv4 synth vision tensors");
  const family::TensorSource src = family::synthetic_tensor_source(t.config, seed);
  const family::TensorTable table = family::expected_tensors(t.config);
  std::vector<std::pair<std::string, std::string>> sums;
  for (const family::TensorSpec& s : table.tensors) {
    if (!family::is_vision_tensor(s.name)) continue;
    std::vector<uint8_t> bytes(static_cast<size_t>(s.bytes()));
    const Status st = src.fill(s, 0, bytes);
    EXPECT_TRUE(st.ok()) << s.name << ": " << st.to_string();
    sums.emplace_back(s.name, sha256_hex(bytes));
    EXPECT_TRUE(t.store->add(s.name, s.dtype, s.shape, std::move(bytes)).ok()) << s.name;
  }
  std::sort(sums.begin(), sums.end());
  std::string lines;
  for (const auto& [name, sum] : sums) lines += name + " " + sum + "\n";
  t.digest = sha256_hex({reinterpret_cast<const uint8_t*>(lines.data()), lines.size()});
  auto w = family::bind_vision_weights(t.config, *t.store);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  if (w.ok()) t.weights = std::move(*w);
  return t;
}

// ||a - b|| / ||b|| in double.
double nrms(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, r = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    e += d * d;
    r += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(e / r);
}

// Faithful bf16 implementations part by rounding flips that attention spreads over the image, about one bf16 ulp
// RMS (2^-8); a structural error (a wrong rounding point, order or layout) moves outputs by far more. Bound 2^-6.
const double kBound = std::ldexp(1.0, -6);

void check_preset(Preset p) {
  const std::string name(family::preset_name(p));
  const std::string dir = golden_dir(p);
  nlohmann::json prov;
  {
    std::ifstream f(dir + "/PROVENANCE.json");
    ASSERT_TRUE(f) << dir << "/PROVENANCE.json: cannot open";
    prov = nlohmann::json::parse(f);
  }
  const uint64_t seed = prov.at("checkpoint").at("seed").get<uint64_t>();
  ASSERT_EQ(prov.at("checkpoint").at("preset").get<std::string>(), name);
  ASSERT_EQ(prov.at("checkpoint").at("command").get<std::string>(),
            "dsv4 synth --preset " + name + " --seed " + std::to_string(seed));

  const Tower t = command_weights(p, seed);
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_EQ(t.digest, kVisionWeightsDigest[p == Preset::small]) << name << ": the vision weights of `dsv4 synth` "
                                                                          "changed; the golden files need regenerating";
  const int64_t ps = t.weights.config.patch_size, D = t.weights.hidden, V = t.weights.config.hidden_size;
  ASSERT_EQ(prov.at("patch_size").get<int64_t>(), ps);

  ThreadPool pool(2);
  const auto& images = prov.at("images");
  ASSERT_EQ(images.size(), 4u);
  for (size_t i = 0; i < images.size(); ++i) {
    const auto& im = images[i];
    ImagePatches img;
    img.grid_h = im.at("grid_h").get<int64_t>();
    img.grid_w = im.at("grid_w").get<int64_t>();
    img.patches = vision_testing::gradient_image_patches(im.at("seed").get<uint64_t>(), img.grid_h, img.grid_w, ps);
    ASSERT_EQ(sha256_of(img.patches), im.at("sha256").get<std::string>())
        << name << " image " << i << ": the test image generator no longer gives vision_ref.py's patches";

    std::vector<std::pair<std::string, std::vector<float>>> golden;
    std::vector<std::pair<int64_t, int64_t>> shapes;
    for (const char* out : {"vit_norm", "aligner", "span"}) {
      int64_t rows = 0, cols = 0;
      const std::string path = dir + "/img" + std::to_string(i) + "_" + out + ".npy";
      auto v = vision_testing::read_npy_f32(path, rows, cols);
      ASSERT_TRUE(v.ok()) << v.status().to_string();
      golden.emplace_back(out, std::move(*v));
      shapes.emplace_back(rows, cols);
    }

    for (Precision prec : {Precision::ref32, Precision::ref64}) {
      const char* tag = prec == Precision::ref64 ? "ref64" : "ref32";
      std::vector<float> vit_norm;
      int64_t vit_rows = 0, vit_cols = 0;
      VisionOptions o;
      o.precision = prec;
      o.probe = [&](const std::string& probe, int64_t r, int64_t c, const std::vector<float>& v) {
        if (probe != "vit_norm") return;
        vit_norm = v;
        vit_rows = r;
        vit_cols = c;
      };
      auto e = encode_image(pool, t.weights, img, o);
      ASSERT_TRUE(e.ok()) << e.status().to_string();
      ASSERT_EQ(static_cast<int64_t>(vit_norm.size()), vit_rows * vit_cols);
      const std::pair<int64_t, int64_t> got_shapes[3] = {
          {vit_rows, vit_cols},
          {e->grid.h * e->grid.w, D},
          {static_cast<int64_t>(e->span.size()) / D, D},
      };
      ASSERT_EQ(vit_rows, img.grid_h * img.grid_w);
      ASSERT_EQ(vit_cols, V);
      ASSERT_EQ(static_cast<int64_t>(e->aligner.size()), e->grid.h * e->grid.w * D);
      ASSERT_EQ(static_cast<int64_t>(e->span.size()) % D, 0);
      const std::vector<float>* got[3] = {&vit_norm, &e->aligner, &e->span};
      for (int k = 0; k < 3; ++k) {
        const auto& [out, ref] = golden[k];
        ASSERT_EQ(got_shapes[k], shapes[k]) << name << " image " << i << " " << out << " " << tag << ": shape";
        const double d = nrms(*got[k], ref);
        std::printf("%-5s img%zu %2ldx%-2ld %-8s %s NRMS vs vision.py = %.3g\n", name.c_str(), i, img.grid_h,
                    img.grid_w, out.c_str(), tag, d);
        EXPECT_LE(d, kBound) << name << " image " << i << " " << out << " " << tag;
      }
    }
  }
}

TEST(VisionReference, TinyMatchesDeepSeekVisionPy) { check_preset(Preset::tiny); }
TEST(VisionReference, SmallMatchesDeepSeekVisionPy) { check_preset(Preset::small); }

}  // namespace
}  // namespace dsv4::cpu
