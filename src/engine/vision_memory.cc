// The device vision tower's weights and scratch (see vision_memory.h).
#include "engine/vision_memory.h"

#include <algorithm>

namespace dsv4::engine {
namespace {

constexpr int64_t kAlign = 256;
int64_t aligned(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

int64_t vision_patch_width(const family::VisionConfig& vc) {
  const int64_t p = vc.patch_size;
  return (3 * p * p + 7) / 8 * 8;
}

int64_t max_image_cells(const family::VisionConfig& vc) { return std::max<int64_t>(1, vc.max_image_tokens - 2); }

int64_t max_image_patches(const family::VisionConfig& vc) {
  const int64_t r = vc.downsample_ratio;
  return r * r * max_image_cells(vc);
}

int64_t vision_weight_bytes(const family::VisionConfig& vc, int64_t D) {
  const int64_t V = vc.hidden_size, I = vc.intermediate_size, r = vc.downsample_ratio;
  const auto bf16 = [](int64_t n) { return aligned(2 * n); };
  int64_t b = bf16(V * vision_patch_width(vc)) + bf16(V);
  const int64_t block = 2 * bf16(V) + bf16(3 * V * V) + bf16(3 * V) + bf16(V * V) + bf16(V) + bf16(2 * I * V) +
                        bf16(V * I);
  b += vc.num_hidden_layers * block;
  b += bf16(V);  // final norm
  b += bf16(D * V * r * r) + bf16(D) + bf16(D * D) + bf16(D);
  return b;
}

VisionScratch vision_scratch(const family::VisionConfig& vc, int64_t D, int64_t patches, int64_t cells) {
  const int64_t V = vc.hidden_size, I = vc.intermediate_size, r = vc.downsample_ratio, P = vision_patch_width(vc);
  VisionScratch s;
  int64_t at = 0;
  const auto take = [&](int64_t& field, int64_t bytes) {
    field = at;
    at += aligned(bytes);
  };
  take(s.x, 4 * patches * V);
  take(s.h, 4 * patches * V);
  take(s.wide, 4 * patches * std::max({3 * V, 2 * I, P}));
  take(s.mlp, 4 * patches * I);
  take(s.qkv, 2 * 3 * patches * V);
  take(s.rope, 4 * patches * 64);
  take(s.pixels, 2 * patches * P);
  take(s.unfold, 4 * cells * V * r * r);
  take(s.hidden, 4 * cells * D);
  take(s.sums, 4 * cells * D);
  take(s.out, 2 * cells * D);
  s.total = at;
  return s;
}

int64_t vision_device_bytes(const family::VisionConfig& vc, int64_t D) {
  return vision_weight_bytes(vc, D) + vision_scratch(vc, D, max_image_patches(vc), max_image_cells(vc)).total;
}

}  // namespace dsv4::engine
