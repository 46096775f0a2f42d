// Test helpers: the golden images and manifest under tests/data/vision (made by make_goldens.py from
// Pillow and numpy; see its README).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/sha256.h"
#include "family/deepseek_v41/config.h"

namespace dsv4::vision::testing {

inline std::string golden_dir() { return DSV4_SOURCE_DIR "/tests/data/vision"; }

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

inline std::vector<uint8_t> golden_image(const std::string& name) { return read_bytes(golden_dir() + "/images/" + name); }

inline const nlohmann::json& manifest() {
  static const nlohmann::json m = [] {
    const std::vector<uint8_t> b = read_bytes(golden_dir() + "/manifest.json");
    return nlohmann::json::parse(b.begin(), b.end());
  }();
  return m;
}

// The manifest's configs as the typed VisionConfig (the other fields keep the release defaults).
inline family::VisionConfig golden_config(const std::string& name) {
  const nlohmann::json& c = manifest()["configs"][name];
  family::VisionConfig v;
  v.patch_size = c["patch_size"];
  v.downsample_ratio = c["downsample_ratio"];
  v.max_image_tokens = c["max_image_tokens"];
  v.min_pixels = c["min_pixels"];
  if (!c["max_wh_ratio"].is_null()) v.max_wh_ratio = c["max_wh_ratio"].get<double>();
  return v;
}

template <typename T>
std::string sha256_of(const std::vector<T>& v) {
  return sha256_hex(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)));
}

}  // namespace dsv4::vision::testing
