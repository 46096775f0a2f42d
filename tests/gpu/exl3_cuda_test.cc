// EXL3 GEMM on CUDA: every ExLlamaV3 fixture within the fp32 tolerance of y_ref, and bit-identical
// rows whatever the number of rows in the launch (batch invariance).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "backends/cuda/exl3_device.h"
#include "formats/exl3/half.h"
#include "formats/exl3/pack.h"

namespace dsv4::cuda {
namespace {

// DSV4_SHARED_DIR overrides where shared/ lives (a GPU machine that received only the binaries).
const std::string kFixtureDir = std::string(std::getenv("DSV4_SHARED_DIR") ? std::getenv("DSV4_SHARED_DIR")
                                                                          : DSV4_SOURCE_DIR "/../shared") +
                                "/fixtures/exl3";

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Runs the layer on `rows` rows of x and returns y [rows, out].
std::vector<float> run_gemm(const Exl3DeviceLinear& layer, const std::vector<float>& x, int64_t rows) {
  const int64_t in = layer.weights.in_features, out = layer.weights.out_features;
  DeviceBuffer dx(sizeof(float) * rows * in), dy(sizeof(float) * rows * out);
  DeviceBuffer ws(exl3_workspace_bytes(layer.weights, rows));
  EXPECT_EQ(exl3_workspace_init(layer.weights, ws.get(), nullptr), cudaSuccess);
  cudaMemcpy(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice);
  cudaMemset(dy.get(), 0xFF, dy.bytes());  // poison: every element must be written
  Status s = exl3_gemm_checked(layer, dx.as<float>(), rows, dy.as<float>(), ws.get(), nullptr, "test");
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::vector<float> y(rows * out);
  EXPECT_EQ(cudaMemcpy(y.data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  return y;
}

TEST(Exl3Cuda, FixturesMatchReferenceAndRowsAreBatchInvariant) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kFixtureDir)) {
    if (entry.path().extension() != ".safetensors") continue;
    const std::string stem = entry.path().stem().string();
    SCOPED_TRACE(stem);
    ++files;
    auto checkpoint = Checkpoint::open(entry.path().string());
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
    auto layer = exl3::load_linear(*checkpoint, stem);
    ASSERT_TRUE(layer.ok()) << layer.status().to_string();
    auto device = upload(*layer);
    ASSERT_TRUE(device.ok()) << device.status().to_string();

    const TensorView xv = *checkpoint->tensor("ref.x");
    std::vector<uint16_t> x16(xv.nbytes / 2);
    std::memcpy(x16.data(), xv.data, xv.nbytes);
    std::vector<float> x(x16.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(exl3::half_bits_to_double(x16[i]));
    const TensorView yv = *checkpoint->tensor("ref.y_ref");
    std::vector<float> y_ref(yv.nbytes / 4);
    std::memcpy(y_ref.data(), yv.data, yv.nbytes);

    const int64_t out = layer->out_features;
    const std::vector<float> y16 = run_gemm(*device, x, 16);
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < y16.size(); ++i) {
      ASSERT_TRUE(std::isfinite(y16[i])) << i;
      max_diff = std::max(max_diff, std::fabs(double(y16[i]) - y_ref[i]));
      max_ref = std::max(max_ref, std::fabs(double(y_ref[i])));
    }
    // Fixture README: "≤ 2e-6 for an fp32 implementation" (max|Δ| / max|y_ref|).
    EXPECT_LE(max_diff / max_ref, 2e-6);

    for (int64_t rows : {1, 3, 8}) {
      const std::vector<float> y = run_gemm(*device, x, rows);
      EXPECT_EQ(std::memcmp(y.data(), y16.data(), sizeof(float) * rows * out), 0) << "rows " << rows;
    }
  }
  EXPECT_EQ(files, 42);
}

// A full-width V4.1 expert shape with random trellis words (any word pattern is a valid code):
// rows bit-identical across launch sizes, and close to the CPU double-precision path.
TEST(Exl3Cuda, ExpertShapeBatchInvariantAndCloseToCpu) {
  for (int codebook = 0; codebook < 3; ++codebook) {
    exl3::Linear layer;
    layer.name = "synthetic.w1";
    layer.in_features = 5120;
    layer.out_features = 2304;
    layer.bits = 3;
    layer.codebook = static_cast<exl3::Codebook>(codebook);
    std::mt19937_64 rng(1234 + codebook);
    layer.trellis.resize(layer.in_features / 16 * (layer.out_features / 16) * 16 * layer.bits);
    for (auto& w : layer.trellis) w = static_cast<uint16_t>(rng());
    std::uniform_real_distribution<double> scale(0.005, 0.02);
    for (int64_t i = 0; i < layer.in_features; ++i)
      layer.suh.push_back(exl3::double_to_half_bits((rng() & 1 ? -1 : 1) * scale(rng)));
    for (int64_t i = 0; i < layer.out_features; ++i)
      layer.svh.push_back(exl3::double_to_half_bits((rng() & 1 ? -1 : 1) * scale(rng) * 50));
    auto device = upload(layer);
    ASSERT_TRUE(device.ok()) << device.status().to_string();
    const int64_t rows = 32;
    std::vector<float> x(rows * layer.in_features);
    std::normal_distribution<float> normal(0.f, 1.f);
    for (auto& v : x) v = normal(rng);
    const std::vector<float> y_all = run_gemm(*device, x, rows);
    for (int64_t r : {1, 5, 9}) {
      const std::vector<float> y = run_gemm(*device, x, r);
      EXPECT_EQ(std::memcmp(y.data(), y_all.data(), sizeof(float) * r * layer.out_features), 0) << r;
    }
    std::vector<float> y_cpu(rows * layer.out_features);
    exl3::matmul<double>(layer, exl3::decode_wq(layer), x.data(), rows, y_cpu.data());
    double num = 0, den = 0;
    for (size_t i = 0; i < y_cpu.size(); ++i) {
      num += (double(y_all[i]) - y_cpu[i]) * (double(y_all[i]) - y_cpu[i]);
      den += double(y_cpu[i]) * y_cpu[i];
    }
    // fp32 sums of 5120 products: relative rounding error ~ sqrt(5120)·2^-24 ≈ 4e-6; 2e-5 leaves margin.
    EXPECT_LE(std::sqrt(num / den), 2e-5) << "codebook " << codebook;
  }
}

}  // namespace
}  // namespace dsv4::cuda
