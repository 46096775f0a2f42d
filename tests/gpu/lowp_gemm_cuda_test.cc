// The many-row GEMM of the FP8 / FP4 linears and routed experts (lowp_gemm.cuh) against the 64 x 64
// prefill tiles and the row kernels: the output BYTES must be equal (memcmp), at every row count, column
// count and K split, for every row tile size of the GEMM.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernels/block/moe_experts.cuh"
#include "backends/cuda/kernels/linear/linear.cuh"
#include "backends/cuda/runtime/device_buffer.h"
#include "core/bf16.h"

namespace dsv4::cuda {
namespace {

template <typename T>
DeviceBuffer to_device(const std::vector<T>& v) {
  DeviceBuffer b(sizeof(T) * std::max<size_t>(1, v.size()));
  EXPECT_EQ(cudaMemcpy(b.get(), v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice), cudaSuccess);
  return b;
}

// Random stored weights: e4m3 codes without NaN, or any e2m1 nibbles; power-of-two scale bytes 2^-9 .. 2^0.
std::vector<uint8_t> random_codes(size_t n, bool fp8, std::mt19937& rng) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) {
    b = static_cast<uint8_t>(rng());
    if (fp8 && (b & 0x7F) == 0x7F) b ^= 1;
  }
  return v;
}
std::vector<uint8_t> random_scales(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(118 + rng() % 10);
  return v;
}
// bf16 activations, rows scaled by 2^[-3, 3], some zeros, a few wide outliers.
std::vector<float> random_x(int64_t rows, int64_t in, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(rows * in);
  for (int64_t r = 0; r < rows; ++r) {
    const float s = std::ldexp(1.f, static_cast<int>(rng() % 7) - 3);
    for (int64_t k = 0; k < in; ++k) {
      float v = nd(rng) * s;
      if (rng() % 97 == 0) v *= 40.f;
      if (rng() % 89 == 0) v = 0.f;
      x[r * in + k] = round_bf16(v);
    }
  }
  return x;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Equal bytes, or the first differing element with its row, column and both values in hex.
::testing::AssertionResult same_bytes(const std::vector<float>& got, const std::vector<float>& want, int64_t cols,
                                      const std::string& what) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0) return ::testing::AssertionSuccess();
  int64_t first = -1, count = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (bits(got[i]) != bits(want[i])) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++count;
    }
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s: %lld of %zu elements differ; first at row %lld col %lld: 0x%08x (%g) vs 0x%08x (%g)",
                what.c_str(), (long long)count, got.size(), (long long)(first / cols), (long long)(first % cols),
                bits(got[first]), got[first], bits(want[first]), want[first]);
  return ::testing::AssertionFailure() << buf;
}

struct Modes {  // restores the defaults when a test ends, however it ends
  ~Modes() {
    set_lowp_gemm(true);
    set_lowp_gemm_wgmma(false);
    set_lowp_gemm_tile_rows(0);
    set_lowp_tile_rows(0);
  }
};

// Runs check(label) once per form of the many-row GEMM: mma.sync at each row tile (32, 64, 128; 0: its
// choice), then the warpgroup MMA at each of its row tiles (64, 128) where the device has it. Returns whether the
// warpgroup MMA ran. Leaves the GEMM on, on mma.sync, at its own row tiles.
template <typename Check>
bool each_gemm_form(Check check) {
  set_lowp_gemm(true);
  bool wg_ran = false;
  for (bool wg : {false, true}) {
    set_lowp_gemm_wgmma(wg);
    if (wg && !lowp_gemm_wgmma_active()) break;
    wg_ran = wg_ran || wg;
    for (int tile_rows : wg ? std::vector<int>{0, 64, 128} : std::vector<int>{0, 32, 64, 128}) {
      set_lowp_gemm_tile_rows(tile_rows);
      check("GEMM tile rows " + std::to_string(tile_rows) + (wg ? " (0: its choice) on the warpgroup MMA"
                                                                : " (0: its choice) on mma.sync"));
      if (::testing::Test::HasFatalFailure()) break;  // the first mismatch is the report
    }
    if (::testing::Test::HasFatalFailure()) break;
  }
  set_lowp_gemm_wgmma(false);
  set_lowp_gemm_tile_rows(0);
  return wg_ran;
}

// One FP8 (fp4 = false) or FP4 linear [out, in] with act_block ab.
struct Linear {
  bool fp4;
  int64_t out, in;
  int block, ab;
  DeviceBuffer w, scale;
  Fp8View v8;
  Fp4View v4;
  Linear(bool f4, int64_t o, int64_t i, int blk, int act, uint32_t seed) : fp4(f4), out(o), in(i), block(blk), ab(act) {
    std::mt19937 rng(seed);
    if (fp4) {
      w = to_device(random_codes(size_t(out) * in / 2, false, rng));
      scale = to_device(random_scales(size_t(out) * (in / 32), rng));
      v4 = Fp4View{w.as<uint8_t>(), scale.as<uint8_t>(), out, in};
    } else {
      w = to_device(random_codes(size_t(out) * in, true, rng));
      scale = to_device(random_scales(size_t((out + block - 1) / block) * ((in + block - 1) / block), rng));
      v8 = Fp8View{w.as<uint8_t>(), scale.as<uint8_t>(), out, in, block};
    }
  }
  std::string name() const {
    return std::string(fp4 ? "fp4" : "fp8") + " [" + std::to_string(out) + ", " + std::to_string(in) + "] block " +
           std::to_string(block) + " act_block " + std::to_string(ab);
  }
  // y [rows, out] of x's rows [r0, r0 + rows) in launches of `piece` rows (0: one launch).
  std::vector<float> run(const DeviceBuffer& dx, int64_t r0, int64_t rows, int64_t piece = 0) const {
    DeviceBuffer dy(sizeof(float) * std::max<int64_t>(1, rows * out));
    cudaMemset(dy.get(), 0xFF, dy.bytes());  // poison: every element must be written
    if (piece <= 0) piece = rows;
    for (int64_t a = 0; a < rows; a += piece) {
      const int64_t n = std::min(piece, rows - a);
      const float* x = dx.as<float>() + (r0 + a) * in;
      float* y = dy.as<float>() + a * out;
      const cudaError_t e = fp4 ? fp4_linear(x, n, v4, ab, y, nullptr) : fp8_linear(x, n, v8, ab, y, nullptr);
      EXPECT_EQ(e, cudaSuccess) << name() << " rows " << n << ": " << cudaGetErrorString(e);
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << name();
    std::vector<float> y(rows * out);
    EXPECT_EQ(cudaMemcpy(y.data(), dy.get(), sizeof(float) * y.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    return y;
  }
};

// For each row count: the GEMM (at each row tile size) against the 64 x 64 tiles over the same launch and
// against the row kernels in launches of 8 rows.
void check_linear(const Linear& L, const std::vector<int64_t>& row_counts, uint32_t seed) {
  Modes restore;
  const int64_t most = *std::max_element(row_counts.begin(), row_counts.end());
  std::mt19937 rng(seed);
  const std::vector<float> x = random_x(most + 5, L.in, rng);
  const DeviceBuffer dx = to_device(x);
  for (int64_t rows : row_counts) {
    const int64_t r0 = rows == most ? 0 : 5;  // some launches start past row 0
    set_lowp_tile_rows(-1);                   // every row count on the many-row path
    set_lowp_gemm(false);
    const std::vector<float> tiles = L.run(dx, r0, rows);
    set_lowp_tile_rows(0);
    const std::vector<float> row_kernels = L.run(dx, r0, rows, 8);
    ASSERT_TRUE(same_bytes(tiles, row_kernels, L.out, L.name() + " rows " + std::to_string(rows) +
                                                          ": 64 x 64 tiles vs row kernels (8-row launches)"));
    set_lowp_tile_rows(-1);
    const bool wg = each_gemm_form([&](const std::string& form) {
      const std::vector<float> gemm = L.run(dx, r0, rows);
      ASSERT_TRUE(same_bytes(gemm, tiles, L.out, L.name() + " rows " + std::to_string(rows) + " " + form +
                                                      " vs 64 x 64 tiles"));
    });
    if (::testing::Test::HasFatalFailure()) return;
    std::printf("[ %s ] rows %lld: GEMM%s == 64 x 64 tiles == row kernels\n", L.name().c_str(), (long long)rows,
                wg ? " (mma.sync and warpgroup MMA)" : " (mma.sync; no warpgroup MMA on this device)");
  }
}

const std::vector<int64_t> kRows = {1, 7, 33, 64, 65, 127, 128, 129, 300, 1000, 4096};

// V4.1: 32 x 32 FP8 blocks; columns not a multiple of 128; K of 10 slices (80 chunks).
TEST(LowpGemmCuda, Fp8Blocks32EqualsTilesAndRowKernels) {
  check_linear(Linear(false, 1000, 2560, 32, 32, 1), kRows, 11);
}
// 0731: 128 x 128 FP8 blocks and act blocks of 128; K of 12 slices.
TEST(LowpGemmCuda, Fp8Blocks128EqualsTilesAndRowKernels) {
  check_linear(Linear(false, 777, 3072, 128, 128, 2), kRows, 12);
}
// K not a multiple of a pipeline stage (41 chunks: a last stage of one chunk), act blocks of 64 over 32-blocks.
TEST(LowpGemmCuda, Fp8PartialStageEqualsTilesAndRowKernels) {
  check_linear(Linear(false, 300, 1312, 32, 32, 3), {1, 33, 129, 1000}, 13);
  check_linear(Linear(false, 130, 1280, 32, 64, 4), {7, 65, 300}, 14);
}
// FP4 experts' shapes: per-32 scales; K of several slices and K with a partial stage.
TEST(LowpGemmCuda, Fp4EqualsTilesAndRowKernels) {
  check_linear(Linear(true, 1000, 2560, 32, 32, 5), kRows, 15);
  check_linear(Linear(true, 200, 1312, 32, 32, 6), {1, 65, 300}, 16);
  check_linear(Linear(true, 136, 2048, 32, 128, 7), {33, 129}, 17);
}
// A K so wide that a long launch goes in two quantized pieces (lowp::gemm_chunk_rows): against the
// 64 x 64 tiles only (the row kernels' staging of such a K does not fit shared memory either).
TEST(LowpGemmCuda, WideKInPiecesEqualsTiles) {
  Modes restore;
  const Linear L(false, 200, 16384, 32, 32, 8);
  std::mt19937 rng(18);
  const int64_t rows = 6500;
  const DeviceBuffer dx = to_device(random_x(rows, L.in, rng));
  set_lowp_tile_rows(-1);
  set_lowp_gemm(false);
  const std::vector<float> tiles = L.run(dx, 0, rows);
  set_lowp_gemm(true);
  for (bool wg : {false, true}) {
    set_lowp_gemm_wgmma(wg);
    if (wg && !lowp_gemm_wgmma_active()) break;
    const std::string form = wg ? " (warpgroup MMA)" : " (mma.sync)";
    const std::vector<float> gemm = L.run(dx, 0, rows);
    ASSERT_TRUE(same_bytes(gemm, tiles, L.out, L.name() + " rows 6500: GEMM" + form + " vs 64 x 64 tiles"));
    const std::vector<float> part = L.run(dx, 3000, 129);
    ASSERT_TRUE(same_bytes(part, std::vector<float>(gemm.begin() + 3000 * L.out, gemm.begin() + 3129 * L.out), L.out,
                           L.name() + " rows [3000, 3129) alone vs in the 6500-row launch" + form));
    std::printf("[ %s ] rows 6500 in pieces: GEMM%s == 64 x 64 tiles\n", L.name().c_str(), form.c_str());
  }
}

// Routed experts with uneven segments: per expert the given pair count (0: no pair), the experts marked
// `other` held by another rank (pair_expert -1); rows drawn at random, pairs sorted by (expert, row).
struct Routing {
  std::vector<int32_t> row, expert;
  std::vector<float> weight;
};
Routing uneven(const std::vector<int>& counts, const std::vector<bool>& other, int64_t rows, std::mt19937& rng) {
  Routing p;
  for (size_t e = 0; e < counts.size(); ++e) {
    std::vector<int32_t> r(counts[e]);
    for (auto& v : r) v = static_cast<int32_t>(rng() % rows);
    std::sort(r.begin(), r.end());
    for (int32_t v : r) {
      p.row.push_back(v);
      p.expert.push_back(other[e] ? -1 : static_cast<int32_t>(e));
      p.weight.push_back(std::uniform_real_distribution<float>(0.05f, 0.6f)(rng));
    }
  }
  return p;
}

void check_experts(int64_t D, int64_t I, const std::vector<int>& counts, const std::vector<bool>& other, uint32_t seed) {
  Modes restore;
  const int64_t E = static_cast<int64_t>(counts.size()), rows = 700;
  std::mt19937 rng(seed);
  std::vector<DeviceBuffer> keep;
  std::vector<Fp4View> v1, v3, v2;
  auto fp4 = [&](int64_t out, int64_t in) {
    keep.push_back(to_device(random_codes(size_t(out) * in / 2, false, rng)));
    const uint8_t* w = keep.back().as<uint8_t>();
    keep.push_back(to_device(random_scales(size_t(out) * (in / 32), rng)));
    return Fp4View{w, keep.back().as<uint8_t>(), out, in};
  };
  for (int64_t e = 0; e < E; ++e) v1.push_back(fp4(I, D)), v3.push_back(fp4(I, D)), v2.push_back(fp4(D, I));
  const DeviceBuffer d1 = to_device(v1), d3 = to_device(v3), d2 = to_device(v2);
  const DeviceBuffer dx = to_device(random_x(rows, D, rng));
  const Routing p = uneven(counts, other, rows, rng);
  const int64_t n = static_cast<int64_t>(p.row.size());
  const DeviceBuffer drow = to_device(p.row), dexp = to_device(p.expert), dw = to_device(p.weight);
  auto run = [&](int64_t tile_pairs) {
    DeviceBuffer scratch(sizeof(float) * (n * 3 * I + 64)), out(sizeof(float) * n * D);
    cudaMemset(out.get(), 0xFF, out.bytes());  // the pairs of another rank's experts keep this
    const cudaError_t e = moe_routed_experts(dx.as<float>(), drow.as<int32_t>(), dexp.as<int32_t>(), dw.as<float>(), n,
                                             d1.as<Fp4View>(), d3.as<Fp4View>(), d2.as<Fp4View>(), D, I, 32, 10.f,
                                             scratch.as<float>(), out.as<float>(), nullptr, tile_pairs);
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> y(n * D);
    EXPECT_EQ(cudaMemcpy(y.data(), out.get(), out.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return y;
  };
  const std::string what = "experts D=" + std::to_string(D) + " I=" + std::to_string(I) + " pairs " + std::to_string(n);
  const std::vector<float> row_kernels = run(int64_t(1) << 40);
  set_lowp_gemm(false);
  const std::vector<float> tiles = run(1);
  ASSERT_TRUE(same_bytes(tiles, row_kernels, D, what + ": 64 x 64 tiles vs row kernels"));
  const bool wg = each_gemm_form([&](const std::string& form) {
    ASSERT_TRUE(same_bytes(run(1), row_kernels, D, what + ": " + form + " vs row kernels"));
  });
  if (::testing::Test::HasFatalFailure()) return;
  std::printf("[ %s ] GEMM%s == 64 x 64 tiles == row kernels\n", what.c_str(),
              wg ? " (mma.sync and warpgroup MMA)" : " (mma.sync)");
}

// Some experts empty, one with most pairs, segments of 1, 7, 33, 129 pairs, two experts of another rank.
TEST(LowpGemmCuda, RoutedExpertsUnevenSegmentsEqualRowKernels) {
  check_experts(1280, 352, {0, 7, 900, 1, 0, 33, 129, 64, 0, 300, 65, 2}, {false, false, false, false, false, true,
                false, false, false, false, true, false}, 21);
  check_experts(640, 256, {128, 0, 3, 2000, 127, 1}, std::vector<bool>(6, false), 22);
}

}  // namespace
}  // namespace dsv4::cuda
