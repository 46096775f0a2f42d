// bf16 tensor-core linears, the grouped wo_a and the fp32 linears' row blocks: exact batch
// invariance across kernels and launch sizes, grouped == per-group launches bit for bit, and the
// oracle's bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "backends/cuda/runtime/device_buffer.h"
#include "backends/cuda/kernels/linear/linear.cuh"
#include "core/bf16.h"
#include "op_testing.h"

namespace dsv4::cuda {
namespace {

using gpu_testing::random_bf16;
using gpu_testing::to_device;

// bf16 weight bits of `n` normal values (sd 0.05, the scale of a trained projection).
std::vector<uint16_t> weight_bits(size_t n, uint32_t seed) {
  std::vector<uint16_t> b(n);
  const std::vector<float> v = random_bf16(n, seed, 0.05f);
  for (size_t i = 0; i < n; ++i) b[i] = f32_to_bf16(v[i]);
  return b;
}

std::vector<float> fetch(const DeviceBuffer& d, size_t n) {
  std::vector<float> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d.get(), n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// y [rows, out] of bf16_linear on rows [r0, r0 + rows) of the device input x [*, in].
std::vector<float> run_bf16(const float* x, int64_t r0, int64_t rows, const Bf16View& w) {
  DeviceBuffer dy(sizeof(float) * rows * w.out);
  cudaMemset(dy.get(), 0xFF, dy.bytes());  // poison: every element must be written
  EXPECT_EQ(bf16_linear(x + r0 * w.in, rows, w, dy.as<float>(), nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return fetch(dy, rows * w.out);
}

// |y - exact| <= one bf16 spacing + the fp32 summation bound (in - 1) 2^-24 sum|terms| (the classic
// gamma_n bound on any fp32 summation order), the exact dot product taken in double (bf16 x bf16
// products and their sums of 4096 terms are exact to far below these bounds in double).
void expect_oracle(const std::vector<float>& x, const std::vector<uint16_t>& w, int64_t in, int64_t out,
                   const std::vector<float>& y, int64_t row) {
  for (int64_t n = 0; n < out; ++n) {
    double s = 0, a = 0;
    for (int64_t k = 0; k < in; ++k) {
      const double p = double(x[row * in + k]) * bf16_to_f32(w[n * in + k]);
      s += p, a += std::fabs(p);
    }
    const double v = y[row * out + n];
    int e = 0;
    std::frexp(std::max(std::fabs(s), std::fabs(v)), &e);
    const double tol = std::ldexp(1.0, e - 8) + (in - 1) * std::ldexp(1.0, -24) * a;
    ASSERT_LE(std::fabs(v - s), tol) << "row " << row << " column " << n;
  }
}

// Launches of 1 .. 300 rows (rows <= 64 take the row kernel, more the 128 x 128 tiles) give every
// row the bits of one 300-row launch.
TEST(WideLinearCuda, Bf16RowsBitIdenticalForEveryLaunchSize) {
  constexpr int64_t kRows = 300;
  const std::pair<int64_t, int64_t> shapes[] = {{29, 40}, {129, 264}, {128, 512}, {64, 5120}, {1024, 4096}};
  for (const auto [out, in] : shapes) {
    SCOPED_TRACE("out=" + std::to_string(out) + " in=" + std::to_string(in));
    const std::vector<float> x = random_bf16(kRows * in, uint32_t(out + in));
    const std::vector<uint16_t> w = weight_bits(out * in, uint32_t(out * 7 + in));
    const DeviceBuffer dx = to_device(x), dw = to_device(w);
    const Bf16View view{dw.as<uint16_t>(), out, in};
    const std::vector<float> all = run_bf16(dx.as<float>(), 0, kRows, view);
    for (const int64_t row : {int64_t{0}, int64_t{131}, kRows - 1}) expect_oracle(x, w, in, out, all, row);
    for (const auto [r0, rows] : {std::pair<int64_t, int64_t>{0, 1}, {0, 3}, {0, 8}, {5, 33}, {0, 37}, {17, 64},
                                  {1, 65}, {100, 100}, {299, 1}, {128, 172}, {3, 297}}) {
      const std::vector<float> y = run_bf16(dx.as<float>(), r0, rows, view);
      ASSERT_EQ(std::memcmp(y.data(), &all[r0 * out], y.size() * sizeof(float)), 0)
          << "rows [" << r0 << ", " << r0 + rows << ") launched alone differ from the 300-row launch";
    }
  }
}

// One grouped launch equals G per-group launches (then [G, R, O] -> [R, G, O]) bit for bit, at the
// V4.1 wo_a shape (8 groups of [1024, 4096]) and a ragged one; row counts on both kernels (40 rows:
// the grouped launch takes the tiles above 16 rows, the plain per-group launches the row kernel).
TEST(WideLinearCuda, GroupedEqualsPerGroupLaunches) {
  struct Shape { int64_t G, O, in; };
  for (const Shape sh : {Shape{8, 1024, 4096}, Shape{3, 40, 72}}) {
    for (const int64_t rows : {1, 5, 40, 70}) {
      SCOPED_TRACE("G=" + std::to_string(sh.G) + " O=" + std::to_string(sh.O) + " rows=" + std::to_string(rows));
      const std::vector<float> x = random_bf16(sh.G * rows * sh.in, uint32_t(rows * 3 + sh.O));  // [G, rows, in]
      const std::vector<uint16_t> w = weight_bits(sh.G * sh.O * sh.in, uint32_t(sh.G + sh.in));
      const DeviceBuffer dx = to_device(x), dw = to_device(w);
      const int64_t GO = sh.G * sh.O;
      DeviceBuffer dy(sizeof(float) * rows * GO);
      cudaMemset(dy.get(), 0xFF, dy.bytes());
      ASSERT_EQ(bf16_grouped_linear(dx.as<float>(), rows, Bf16View{dw.as<uint16_t>(), GO, sh.in}, sh.G, dy.as<float>(), nullptr),
                cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<float> grouped = fetch(dy, rows * GO);
      for (int64_t g = 0; g < sh.G; ++g) {
        const Bf16View wg{dw.as<uint16_t>() + g * sh.O * sh.in, sh.O, sh.in};
        const std::vector<float> y = run_bf16(dx.as<float>() + g * rows * sh.in, 0, rows, wg);
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(std::memcmp(&y[r * sh.O], &grouped[r * GO + g * sh.O], sh.O * sizeof(float)), 0)
              << "group " << g << " row " << r;
      }
    }
  }
}

// fp32 linears (fp32 or bf16-stored weights): launches of 1 .. 300 rows (blocks of 32 rows per CTA
// along grid.y below 64 rows, 4 x 4 tiles of rows and columns from 64 and, for outputs wide enough to fill
// the device with them (16,384 columns), from 2 rows; fp32 inputs with a 4-element tail)
// give every row the bits of one 300-row launch, and the
// 300-row launch is within the fp32 summation bound (in - 1) 2^-24 sum|terms| of the exact dot
// product (computed in double; no output rounding).
TEST(WideLinearCuda, F32RowsBitIdenticalForEveryLaunchSize) {
  constexpr int64_t kRows = 300;
  for (const bool bf16_store : {false, true}) {
    for (const auto [out, in] : {std::pair<int64_t, int64_t>{31, 40}, {384, 5120}, {13, 1028}, {16384, 256}}) {
      if (bf16_store && in % 8) continue;  // bf16 rows come in whole 8-element chunks
      SCOPED_TRACE("out=" + std::to_string(out) + " in=" + std::to_string(in) + (bf16_store ? " bf16 weights" : ""));
      const std::vector<float> x = random_bf16(kRows * in, uint32_t(out + in + 5));
      const std::vector<uint16_t> w = weight_bits(out * in, uint32_t(out * 5 + in));
      std::vector<float> wf(w.size());
      for (size_t i = 0; i < w.size(); ++i) wf[i] = bf16_to_f32(w[i]);
      const DeviceBuffer dx = to_device(x), dw = to_device(w), dwf = to_device(wf);
      auto run = [&](int64_t r0, int64_t rows) {
        DeviceBuffer dy(sizeof(float) * rows * out);
        cudaMemset(dy.get(), 0xFF, dy.bytes());
        const float* xr = dx.as<float>() + r0 * in;
        const cudaError_t e = bf16_store ? f32_linear(xr, rows, Bf16View{dw.as<uint16_t>(), out, in}, dy.as<float>(), nullptr)
                                         : f32_linear(xr, rows, F32View{dwf.as<float>(), out, in}, dy.as<float>(), nullptr);
        EXPECT_EQ(e, cudaSuccess);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        return fetch(dy, rows * out);
      };
      const std::vector<float> all = run(0, kRows);
      for (const int64_t row : {int64_t{0}, int64_t{77}, kRows - 1})
        for (int64_t n = 0; n < out; ++n) {
          double s = 0, a = 0;
          for (int64_t k = 0; k < in; ++k) {
            const double p = double(x[row * in + k]) * wf[n * in + k];
            s += p, a += std::fabs(p);
          }
          ASSERT_LE(std::fabs(all[row * out + n] - s), (in - 1) * std::ldexp(1.0, -24) * a) << "row " << row << " column " << n;
        }
      for (const auto [r0, rows] : {std::pair<int64_t, int64_t>{0, 1}, {0, 3}, {5, 33}, {31, 2}, {100, 100}, {299, 1}, {3, 297},
                                    {0, 64}, {7, 65}, {200, 63}, {9, 8}, {40, 5}}) {
        const std::vector<float> y = run(r0, rows);
        ASSERT_EQ(std::memcmp(y.data(), &all[r0 * out], y.size() * sizeof(float)), 0)
            << "rows [" << r0 << ", " << r0 + rows << ") launched alone differ from the 300-row launch";
      }
    }
  }
}

TEST(WideLinearCuda, GroupedRefusesGroupsThatDoNotDivideTheWeight) {
  const Bf16View w{nullptr, 30, 64};
  EXPECT_EQ(bf16_grouped_linear(nullptr, 1, w, 4, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(bf16_grouped_linear(nullptr, 1, w, 0, nullptr, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace dsv4::cuda
