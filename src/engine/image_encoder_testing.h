// TEST-ONLY: a deterministic stand-in for a vision tower, to check how images flow through the engine and the server
// (span layout, pieces, the prompt cache, usage). It is not a model: each aligner row is a hash of the patches of
// its 3x3 block (with its block index), spread over [-1, 1) in bf16, so different pixels give different rows and the
// same pixels the same rows. Never wire it into the product.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/bf16.h"
#include "engine/image_encoder.h"

namespace dsv4::engine::testing {

inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// bf16 values in [-1, 1) drawn from `seed`, `n` of them.
inline std::vector<uint16_t> hashed_row(uint64_t seed, int64_t n) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = f32_to_bf16(static_cast<float>(mix64(seed + static_cast<uint64_t>(i)) >> 40) /
                                                8388608.0f - 1.0f);
  return v;
}

class HashTower final : public VisionTower {
 public:
  HashTower(int64_t dim, int32_t ratio) : dim_(dim), ratio_(ratio) {}
  StatusOr<std::vector<uint16_t>> aligner_rows(const vision::PixelPatches& p) override {
    ++calls;
    std::vector<uint16_t> out;
    for (int32_t by = 0; by < p.llm_h; ++by)
      for (int32_t bx = 0; bx < p.llm_w; ++bx) {
        uint64_t h = mix64(static_cast<uint64_t>(by) * 1000003u + static_cast<uint64_t>(bx));
        for (int32_t y = by * ratio_; y < std::min(p.grid_h, (by + 1) * ratio_); ++y)
          for (int32_t x = bx * ratio_; x < std::min(p.grid_w, (bx + 1) * ratio_); ++x)
            for (int32_t i = 0; i < p.patch_dim; ++i)
              h = mix64(h ^ p.patches[static_cast<size_t>((int64_t{y} * p.grid_w + x) * p.patch_dim + i)]);
        const std::vector<uint16_t> row = hashed_row(h, dim_);
        out.insert(out.end(), row.begin(), row.end());
      }
    return out;
  }
  int calls = 0;

 private:
  int64_t dim_;
  int32_t ratio_;
};

// Delimiter vectors drawn from `seed` (each its own row).
inline ImageDelimiters hashed_delimiters(int64_t dim, uint64_t seed) {
  return ImageDelimiters{hashed_row(mix64(seed) ^ 1, dim), hashed_row(mix64(seed) ^ 2, dim),
                         hashed_row(mix64(seed) ^ 3, dim)};
}

}  // namespace dsv4::engine::testing
