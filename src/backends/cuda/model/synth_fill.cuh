// Device-side random fills for synthetic full-width weights (`dsv4 bench`): every byte pattern is a
// valid, finite value of its format, with magnitudes that keep activations bounded.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

enum class FillKind : uint8_t {
  e4m3,      // e4m3 codes of magnitude 2^-3 .. 2^0 (never NaN)
  e2m1x2,    // any byte (two e2m1 codes)
  ue8m0,     // scale bytes 2^(lo..lo+1) with lo = 127 - 7
  bf16,      // bf16 bits of magnitude ~2^-7 .. 2^-5
  f32,       // floats of magnitude ~2^-7 .. 2^-5
  f32_one,   // floats near 1 (norm weights)
};

// Fills `bytes` bytes at p (f32 kinds: bytes / 4 floats) from (seed, index) alone.
cudaError_t synth_fill(void* p, int64_t bytes, FillKind kind, uint64_t seed, cudaStream_t s);

}  // namespace dsv4::cuda
