// The synthetic weights of the preset and variant a GPU test runs (forward_testing.h: DSV4_GPU_PRESET,
// DSV4_GPU_VARIANT), for the gtest-based GPU tests.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "family/deepseek_v41/synthetic_weights.h"
#include "backends/cuda/model/model.h"
#include "family/deepseek_v41/preset.h"
#include "forward_testing.h"

namespace dsv4::gpu_testing {

// The synthetic weights (with the drafter) of that preset and variant, drawn with `seed`.
inline std::shared_ptr<const family::Model> chosen_preset_weights(uint64_t seed) {
  auto preset = family::parse_preset(preset_name());
  EXPECT_TRUE(preset.ok());
  auto variant = family::parse_variant(variant_name());
  EXPECT_TRUE(variant.ok()) << variant.status().to_string();
  return family::synthetic_weights(family::preset_config(*preset, variant.ok() ? *variant : family::Variant::v41), seed,
                                true);
}

// w on the device with the default options; null (and a failed expectation) when the upload fails.
inline std::shared_ptr<const cuda::ModelDevice> upload(std::shared_ptr<const family::Model> w) {
  auto m = cuda::ModelDevice::upload(std::move(w), cuda::ModelDeviceOptions{});
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::shared_ptr<const cuda::ModelDevice>(std::move(*m)) : nullptr;
}

}  // namespace dsv4::gpu_testing
