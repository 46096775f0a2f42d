// A tensor-parallel rank's column slice of an EXL3 linear (fabric::exl3_columns, as the rank cut makes it) on
// CUDA: with the K split chosen from the whole linear's width (Exl3Weights::split_out_features) the slice's
// outputs equal the whole GEMM's columns bit for bit, on a shape where the slice alone would choose another
// split (in 4096 on Hopper: the whole 4096 columns take 11 K-slices, a 1024-column slice alone 16). Random trellis
// words (every bit pattern is a valid trellis) and random fp16 scales.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/runtime/device_buffer.h"
#include "backends/cuda/exl3/exl3_device.h"
#include "fabric/exl3_cut.h"
#include "formats/exl3/half.h"

namespace dsv4::cuda {
namespace {

exl3::Linear random_linear(int64_t in, int64_t out, int bits, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> word(0, 0xFFFF);
  std::uniform_real_distribution<double> scale(0.5, 1.5);
  exl3::Linear L;
  L.name = "column slice test";
  L.in_features = in;
  L.out_features = out;
  L.bits = bits;
  L.codebook = exl3::Codebook::mul1;
  std::vector<uint16_t> trellis(static_cast<size_t>(in / 16 * (out / 16) * 16 * bits));
  for (uint16_t& w : trellis) w = static_cast<uint16_t>(word(g));
  L.trellis = std::move(trellis);
  const auto signed_scale = [&] { return exl3::double_to_half_bits((g() & 1 ? -1 : 1) * scale(g) / 64.0); };
  for (int64_t k = 0; k < in; ++k) L.suh.push_back(signed_scale());
  for (int64_t n = 0; n < out; ++n) L.svh.push_back(signed_scale());
  return L;
}

// y [rows, out] of `w` on x [rows, in].
std::vector<float> gemm(const Exl3Weights& w, const std::vector<float>& x, int64_t rows) {
  DeviceBuffer dx(sizeof(float) * x.size()), dy(sizeof(float) * rows * w.out_features), ws(exl3_workspace_bytes(w, rows));
  EXPECT_EQ(cudaMemcpy(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemset(dy.get(), 0xFF, dy.bytes()), cudaSuccess);  // poison: every element must be written
  EXPECT_EQ(exl3_gemm(w, dx.as<float>(), rows, dy.as<float>(), ws.get(), nullptr), cudaSuccess);
  std::vector<float> y(static_cast<size_t>(rows * w.out_features));
  EXPECT_EQ(cudaMemcpy(y.data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  return y;
}

TEST(CudaExl3ColumnSlice, SliceSumsKAsTheWholeLinearBitForBit) {
  constexpr int64_t in = 4096, out = 4096, rows = 5, b = 1024, e = 2048;
  const exl3::Linear L = random_linear(in, out, 3, 1);
  auto S = fabric::exl3_columns(L, b, e);
  ASSERT_TRUE(S.ok()) << S.status().to_string();
  auto whole = upload(L);
  auto slice = upload(*S);
  ASSERT_TRUE(whole.ok() && slice.ok());
  ASSERT_NE(exl3_k_splits(in, e - b), exl3_k_splits(in, out)) << "the shape must make the slice choose another split";
  std::mt19937 g(2);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * in));
  for (float& v : x) v = d(g);
  const std::vector<float> yw = gemm(whole->weights, x, rows);
  // The slice as the rank cut uploads it: its K split from the whole linear's width.
  Exl3Weights w = slice->weights;
  w.split_out_features = out;
  EXPECT_EQ(exl3_k_splits(w), exl3_k_splits(whole->weights));
  const std::vector<float> ys = gemm(w, x, rows);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(std::memcmp(&ys[r * (e - b)], &yw[r * out + b], (e - b) * sizeof(float)), 0) << "row " << r;
  // Information: the slice's own split sums K in another order.
  w.split_out_features = 0;
  const std::vector<float> yo = gemm(w, x, rows);
  int64_t differ = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t n = 0; n < e - b; ++n) differ += yo[r * (e - b) + n] != yw[r * out + b + n];
  std::printf("K splits: whole %d, slice alone %d; with its own split the slice differs from the whole in %lld of %lld "
              "outputs\n", exl3_k_splits(in, out), exl3_k_splits(in, e - b), static_cast<long long>(differ),
              static_cast<long long>(rows * (e - b)));
}

}  // namespace
}  // namespace dsv4::cuda
