// CUDA linears against the CPU oracle (cpu::*_linear<float> and <double>) on random weights in their stored
// formats, V4.1 full-width shapes included, exact batch invariance of every output row, and the upload's refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/exact_encode.h"
#include "backends/cpu/held_weights_testing.h"
#include "backends/cpu/linear.h"
#include "backends/cuda/runtime/arena.h"
#include "backends/cuda/runtime/check.h"
#include "backends/cuda/runtime/device_buffer.h"
#include "backends/cuda/kernels/linear/linear.cuh"
#include "backends/cuda/model/upload.h"
#include "core/bf16.h"
#include "core/fp4.h"
#include "core/fp8.h"
#include "core/thread_pool.h"

namespace dsv4::cuda {
namespace {

ThreadPool& pool() {
  static ThreadPool p;
  return p;
}

// bf16 activations: N(0, 1) scaled per row by 2^[-3, 3], a few zeros and wide outliers.
std::vector<float> random_x(int64_t rows, int64_t in, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(rows * in);
  for (int64_t m = 0; m < rows; ++m) {
    const float row_scale = std::ldexp(1.f, static_cast<int>(rng() % 7) - 3);
    for (int64_t k = 0; k < in; ++k) {
      float v = nd(rng) * row_scale;
      if (rng() % 97 == 0) v *= 40.f;
      if (rng() % 89 == 0) v = 0.f;
      x[m * in + k] = round_bf16(v);
    }
  }
  return x;
}

float random_pow2(std::mt19937& rng, int lo, int hi) { return std::ldexp(1.f, lo + static_cast<int>(rng() % (hi - lo + 1))); }

// A random weight stored as the checkpoint stores it (HeldWeights: e4m3 / e2m1 codes and UE8M0 bytes, bf16 or
// f32), with the exact values and scales it was drawn from (what the bound below sums).
template <typename L>
struct Held {
  cpu::held_testing::HeldWeights bytes;  // the stored bytes the views point into
  L w;
  int64_t out = 0, in = 0;
  std::vector<float> values, scales;  // [out, in]; FP8: [ceil(out/block), ceil(in/block)], FP4: [out, in/32]
};

std::shared_ptr<const Held<family::Fp8Linear>> random_fp8(int64_t out, int64_t in, int block, uint32_t seed) {
  std::mt19937 rng(seed);
  auto h = std::make_shared<Held<family::Fp8Linear>>();
  h->out = out, h->in = in;
  h->values.resize(out * in);
  for (auto& v : h->values) {
    uint8_t c = static_cast<uint8_t>(rng());
    if ((c & 0x7F) == 0x7F) c ^= 1;  // no NaN codes in a checkpoint
    v = e4m3_to_f32(c);
  }
  h->scales.resize(((out + block - 1) / block) * ((in + block - 1) / block));
  for (auto& s : h->scales) s = random_pow2(rng, -14, -6);
  h->w = h->bytes.fp8(out, in, block, h->values, h->scales);
  return h;
}

std::shared_ptr<const Held<family::Fp4Linear>> random_fp4(int64_t out, int64_t in, uint32_t seed) {
  std::mt19937 rng(seed);
  auto h = std::make_shared<Held<family::Fp4Linear>>();
  h->out = out, h->in = in;
  h->values.resize(out * in);
  for (auto& v : h->values) v = e2m1_to_f32(static_cast<uint8_t>(rng() & 15));
  h->scales.resize(out * (in / 32));
  for (auto& s : h->scales) s = random_pow2(rng, -9, -3);
  h->w = h->bytes.fp4(out, in, h->values, h->scales);
  return h;
}

// bf16 values N(0, 0.05); stored bf16, or (f32) as f32 tensors of the same values.
std::shared_ptr<const Held<family::Matrix>> random_matrix(int64_t out, int64_t in, uint32_t seed, bool f32 = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 0.05f);
  auto h = std::make_shared<Held<family::Matrix>>();
  h->out = out, h->in = in;
  h->values.resize(out * in);
  for (auto& v : h->values) v = round_bf16(nd(rng));
  if (f32) {
    h->w.weight = h->bytes.f32(h->values);
    h->w.weight.shape = {out, in};
  } else {
    h->w = h->bytes.bf16(out, in, h->values);
  }
  return h;
}

// One linear kind under test: runs the device linear on `rows` rows starting at row `r0` of the
// device input and returns y [rows, out].
struct Case {
  std::string name;
  int64_t out, in;
  bool bf16_out;  // f32_linear keeps fp32
  std::function<cudaError_t(const float*, int64_t, float*)> device;
  std::function<void(const float*, int64_t, float*)> ref32;
  std::function<void(const float*, int64_t, double*)> ref64;  // bf16 kinds: the oracle's <double>, bf16
  std::function<void(const float*, int64_t, double*)> abs64;  // sum of |terms| (scales included) per output
};

std::vector<float> run_device(const Case& c, const DeviceBuffer& dx, int64_t r0, int64_t rows) {
  DeviceBuffer dy(sizeof(float) * rows * c.out);
  cudaMemset(dy.get(), 0xFF, dy.bytes());  // poison: every element must be written
  const float* x = dx.as<float>() + r0 * c.in;
  const Status st = launch_status(c.device(x, rows, dy.as<float>()), c.name,
                                  shape_text({{"rows", rows}, {"out", c.out}, {"in", c.in}}));
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.name;
  std::vector<float> y(rows * c.out);
  EXPECT_EQ(cudaMemcpy(y.data(), dy.get(), dy.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
  return y;
}

// Distance between adjacent bf16 values at magnitude v (8 significant bits; subnormals ignored).
double bf16_spacing(double v) {
  if (v == 0) return std::ldexp(1.0, -133);
  int e = 0;
  std::frexp(v, &e);  // v in [2^(e-1), 2^e)
  return std::ldexp(1.0, e - 8);
}

// Checks the device against both oracles on the first `ref_rows` rows, then batch invariance.
void check_case(const Case& c, int64_t ref_rows, uint32_t seed) {
  SCOPED_TRACE(c.name + " out=" + std::to_string(c.out) + " in=" + std::to_string(c.in));
  // 100 rows: FP8/FP4 launches of more than 32 rows take the 64-row prefill tiles (two of them
  // here), launches of up to 32 the 8-row passes; a row's bits must not depend on which.
  constexpr int64_t kRows = 100;
  const std::vector<float> x = random_x(kRows, c.in, seed);
  DeviceBuffer dx(sizeof(float) * x.size());
  ASSERT_EQ(cudaMemcpy(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  const std::vector<float> yall = run_device(c, dx, 0, kRows);

  std::vector<float> r32(ref_rows * c.out);
  std::vector<double> r64(ref_rows * c.out);
  c.ref32(x.data(), ref_rows, r32.data());
  c.ref64(x.data(), ref_rows, r64.data());
  std::vector<double> a64(ref_rows * c.out);
  c.abs64(x.data(), ref_rows, a64.data());
  int64_t mismatches = 0;
  double worst_ulps = 0, worst_rel64 = 0;
  for (int64_t i = 0; i < ref_rows * c.out; ++i) {
    // fp32 summation of `in` terms in any order errs by at most (in - 1) * 2^-24 * sum|terms| (the
    // classic gamma_n bound); the device and ref32 each carry such an error.
    const double bound = (c.in - 1) * std::ldexp(1.0, -24) * a64[i];
    if (c.bf16_out) {
      // ref64 is the oracle's double result rounded once to bf16; the device rounds its fp32 sum once
      // to bf16: they differ by at most one bf16 spacing plus the device's summation error.
      const double ulp = bf16_spacing(std::max(std::fabs(r64[i]), std::fabs(double(yall[i]))));
      EXPECT_LE(std::fabs(yall[i] - r64[i]), ulp + bound) << "element " << i << " device " << yall[i] << " ref64 " << r64[i];
      EXPECT_LE(std::fabs(yall[i] - r32[i]), ulp + 2 * bound) << "element " << i << " device " << yall[i] << " ref32 " << r32[i];
      mismatches += yall[i] != r32[i];
      worst_ulps = std::max(worst_ulps, std::fabs(yall[i] - r32[i]) / bf16_spacing(std::fabs(double(r32[i]))));
    } else {
      worst_rel64 = std::max(worst_rel64, std::fabs(yall[i] - r64[i]) / std::max(1e-30, std::fabs(r64[i])));
      EXPECT_LE(std::fabs(yall[i] - r64[i]), bound) << "element " << i;
      EXPECT_LE(std::fabs(r32[i] - r64[i]), bound) << "element " << i;
    }
  }
  // The device sums the same exact products in another order than ref32, so the fp32 value before
  // the final bf16 rounding differs in its last bits; that flips the bf16 rounding only when the
  // value lies within those bits of a rounding boundary (or the sum cancels): a small fraction.
  if (c.bf16_out) EXPECT_LE(mismatches, std::max<int64_t>(2, ref_rows * c.out / 100)) << "bf16 mismatches vs ref32";
  std::printf("[ %s out=%lld in=%lld ] vs ref32: %lld of %lld bf16 values differ (max %.0f spacings); fp32 max rel vs ref64 %.3g\n",
              c.name.c_str(), (long long)c.out, (long long)c.in, (long long)mismatches, (long long)(ref_rows * c.out),
              worst_ulps, worst_rel64);

  // Batch invariance, exact: launches of 1, 3, 8, 37 rows and rows from offsets give the same bits.
  for (const auto [r0, rows] :
       {std::pair<int64_t, int64_t>{0, 1}, {0, 3}, {0, 8}, {29, 8}, {17, 1}, {36, 1}, {0, 37}, {70, 8}, {99, 1}, {60, 33}}) {
    const std::vector<float> y = run_device(c, dx, r0, rows);
    ASSERT_EQ(std::memcmp(y.data(), &yall[r0 * c.out], y.size() * sizeof(float)), 0)
        << "rows [" << r0 << ", " << r0 + rows << ") launched alone differ from the 100-row launch";
  }
}

struct Fixture {
  Arena arena{size_t(1) << 30};
};

void fp8_case(Fixture& f, int64_t out, int64_t in, int block, int act_block, int64_t ref_rows, uint32_t seed) {
  auto h = random_fp8(out, in, block, seed);
  const size_t mark = f.arena.mark();
  auto v = upload_now(h->w, f.arena, "fp8");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  const Fp8View view = *v;
  Case c{"fp8_linear", out, in, true,
         [=](const float* x, int64_t r, float* y) { return fp8_linear(x, r, view, act_block, y, nullptr); },
         [=](const float* x, int64_t r, float* y) { cpu::fp8_linear<float>(pool(), x, r, h->w, y, act_block); },
         [=](const float* x, int64_t r, double* y) {
           std::vector<float> yf(r * h->out);
           cpu::fp8_linear<double>(pool(), x, r, h->w, yf.data(), act_block);
           std::copy(yf.begin(), yf.end(), y);
         },
         [=](const float* x, int64_t r, double* y) {
           const int64_t nb = h->in / act_block, wsb = (h->in + block - 1) / block;
           std::vector<float> xq(h->in), xs(nb);
           for (int64_t m = 0; m < r; ++m) {
             cpu::act_quant_row(x + m * h->in, h->in, act_block, xq.data(), xs.data());
             for (int64_t n = 0; n < h->out; ++n) {
               double a = 0;
               for (int64_t k = 0; k < h->in; ++k)
                 a += std::fabs(double(xq[k]) * h->values[n * h->in + k] * xs[k / act_block] *
                                h->scales[(n / block) * wsb + k / block]);
               y[m * h->out + n] = a;
             }
           }
         }};
  check_case(c, ref_rows, seed + 1);
  f.arena.reset(mark);
}

void fp4_case(Fixture& f, int64_t out, int64_t in, int act_block, int64_t ref_rows, uint32_t seed) {
  auto h = random_fp4(out, in, seed);
  const size_t mark = f.arena.mark();
  auto v = upload_now(h->w, f.arena, "fp4");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  const Fp4View view = *v;
  Case c{"fp4_linear", out, in, true,
         [=](const float* x, int64_t r, float* y) { return fp4_linear(x, r, view, act_block, y, nullptr); },
         [=](const float* x, int64_t r, float* y) { cpu::fp4_linear<float>(pool(), x, r, h->w, y, act_block); },
         [=](const float* x, int64_t r, double* y) {
           std::vector<float> yf(r * h->out);
           cpu::fp4_linear<double>(pool(), x, r, h->w, yf.data(), act_block);
           std::copy(yf.begin(), yf.end(), y);
         },
         [=](const float* x, int64_t r, double* y) {
           std::vector<float> xq(h->in), xs(h->in / act_block);
           for (int64_t m = 0; m < r; ++m) {
             cpu::act_quant_row(x + m * h->in, h->in, act_block, xq.data(), xs.data());
             for (int64_t n = 0; n < h->out; ++n) {
               double a = 0;
               for (int64_t k = 0; k < h->in; ++k)
                 a += std::fabs(double(xq[k]) * h->values[n * h->in + k] * xs[k / act_block] *
                                h->scales[n * (h->in / 32) + k / 32]);
               y[m * h->out + n] = a;
             }
           }
         }};
  check_case(c, ref_rows, seed + 1);
  f.arena.reset(mark);
}

// Sum of |x * w| per output of a plain matrix (its exact values).
void abs_matrix(const Held<family::Matrix>& h, const float* x, int64_t r, double* y) {
  for (int64_t m = 0; m < r; ++m)
    for (int64_t n = 0; n < h.out; ++n) {
      double a = 0;
      for (int64_t k = 0; k < h.in; ++k) a += std::fabs(double(x[m * h.in + k]) * h.values[n * h.in + k]);
      y[m * h.out + n] = a;
    }
}

void bf16_case(Fixture& f, int64_t out, int64_t in, int64_t ref_rows, uint32_t seed) {
  auto h = random_matrix(out, in, seed);
  const size_t mark = f.arena.mark();
  auto v = upload_bf16_now(h->w, f.arena, "bf16");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  const Bf16View view = *v;
  Case c{"bf16_linear", out, in, true,
         [=](const float* x, int64_t r, float* y) { return bf16_linear(x, r, view, y, nullptr); },
         [=](const float* x, int64_t r, float* y) { cpu::bf16_linear<float>(pool(), x, r, h->w, y); },
         [=](const float* x, int64_t r, double* y) {
           std::vector<float> yf(r * h->out);
           cpu::bf16_linear<double>(pool(), x, r, h->w, yf.data());
           std::copy(yf.begin(), yf.end(), y);
         },
         [=](const float* x, int64_t r, double* y) { abs_matrix(*h, x, r, y); }};
  check_case(c, ref_rows, seed + 1);
  f.arena.reset(mark);
}

// The fp32 linear over bf16 values stored as f32; bf16_store: the same values stored bf16 and kept as bf16 on
// the device (f32_linear(Bf16View)).
void f32_case(Fixture& f, int64_t out, int64_t in, int64_t ref_rows, uint32_t seed, bool bf16_store = false) {
  auto h = random_matrix(out, in, seed, !bf16_store);
  const size_t mark = f.arena.mark();
  std::function<cudaError_t(const float*, int64_t, float*)> device;
  if (bf16_store) {
    auto v = upload_bf16_now(h->w, f.arena, "f32 over bf16");
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    const Bf16View view = *v;
    device = [=](const float* x, int64_t r, float* y) { return f32_linear(x, r, view, y, nullptr); };
  } else {
    auto v = upload_f32_now(h->w, f.arena, "f32");
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    const F32View view = *v;
    device = [=](const float* x, int64_t r, float* y) { return f32_linear(x, r, view, y, nullptr); };
  }
  Case c{bf16_store ? "f32_linear(bf16 w)" : "f32_linear", out, in, false, device,
         [=](const float* x, int64_t r, float* y) { cpu::f32_linear<float>(pool(), x, r, h->w, y); },
         [=](const float* x, int64_t r, double* y) {
           std::vector<double> xd(x, x + r * h->in);
           cpu::f32_linear<double>(pool(), xd.data(), r, h->w, y);
         },
         [=](const float* x, int64_t r, double* y) { abs_matrix(*h, x, r, y); }};
  check_case(c, ref_rows, seed + 1);
  f.arena.reset(mark);
}

// Shapes: V4.1 (model-spec.md §2.1): D = 5120, q_lora 1280, 64 heads x 512, o_groups 8 x o_lora
// 1024, moe_inter 2304, 384 experts, index 32 heads x 128; plus small and ragged shapes.
TEST(LinearCuda, Fp8MatchesOracleAndIsBatchInvariant) {
  Fixture f;
  fp8_case(f, 64, 256, 32, 32, 37, 11);
  fp8_case(f, 37, 96, 32, 32, 37, 12);
  fp8_case(f, 130, 512, 128, 128, 37, 13);  // V4 / 0731: 128x128 weight blocks, act block 128
  fp8_case(f, 1280, 5120, 32, 32, 3, 14);   // wq_a
  fp8_case(f, 512, 5120, 32, 32, 3, 15);    // wkv
  fp8_case(f, 32768, 1280, 32, 32, 1, 16);  // wq_b
  fp8_case(f, 5120, 8192, 32, 32, 1, 17);   // wo_b
  fp8_case(f, 2304, 5120, 32, 32, 2, 18);   // shared expert w1 / w3
  fp8_case(f, 5120, 2304, 32, 32, 2, 19);   // shared expert w2
  fp8_case(f, 5120, 15360, 32, 32, 2, 20);  // DSpark main_proj (3 taps x D): the rows' staging exceeds shared memory
}

TEST(LinearCuda, Fp4MatchesOracleAndIsBatchInvariant) {
  Fixture f;
  fp4_case(f, 64, 256, 32, 37, 21);
  fp4_case(f, 33, 160, 32, 37, 22);
  fp4_case(f, 40, 512, 128, 37, 23);        // act block 128 over 32-wide weight scales
  fp4_case(f, 2304, 5120, 32, 2, 24);       // routed expert w1 / w3
  fp4_case(f, 5120, 2304, 32, 2, 25);       // routed expert w2
}

TEST(LinearCuda, Bf16MatchesOracleAndIsBatchInvariant) {
  Fixture f;
  bf16_case(f, 29, 40, 37, 31);
  bf16_case(f, 128, 512, 37, 32);           // indexer wk
  bf16_case(f, 32, 5120, 37, 33);           // weights_proj
  bf16_case(f, 8192, 4096, 1, 34);          // wo_a
}

TEST(LinearCuda, F32MatchesOracleAndIsBatchInvariant) {
  Fixture f;
  f32_case(f, 31, 36, 37, 41);
  f32_case(f, 384, 5120, 8, 42);            // router gate
  f32_case(f, 1, 5376, 37, 43);             // DSpark confidence head (D + R)
  f32_case(f, 4096, 5120, 2, 44);           // a slice of the LM head
  f32_case(f, 4096, 5120, 2, 45, true);     // the same, weights kept as bf16
  f32_case(f, 48, 5120, 37, 46, true);
}

// A tensor-parallel rank holds rows [n0, n1) of wq_b (whole 32-row scale tiles, as
// fabric::rank_model cuts them); its launch over that slice must give exactly the
// columns [n0, n1) of the whole weight's launch, for decode (1-8 rows) and prefill (40 rows) alike.
// The full V4.1 width matters: a K split chosen from the output width gave TP 4/8 other bits.
TEST(LinearCuda, Fp8ColumnSliceEqualsWholeLaunch) {
  constexpr int64_t kOut = 32768, kIn = 1280, kRows = 40;  // wq_b [64 heads x 512, q_lora]
  constexpr int kBlock = 32, kAct = 32;
  Fixture f;
  auto w = random_fp8(kOut, kIn, kBlock, 51);
  auto v = upload_now(w->w, f.arena, "wq_b");
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  const Fp8View whole = *v;
  const std::vector<float> x = random_x(kRows, kIn, 52);
  DeviceBuffer dx(sizeof(float) * x.size()), dy(sizeof(float) * kRows * kOut);
  ASSERT_EQ(cudaMemcpy(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  for (const int64_t rows : {int64_t{1}, int64_t{3}, int64_t{8}, kRows}) {
    ASSERT_EQ(fp8_linear(dx.as<float>(), rows, whole, kAct, dy.as<float>(), nullptr), cudaSuccess);
    std::vector<float> yw(rows * kOut);
    ASSERT_EQ(cudaMemcpy(yw.data(), dy.get(), yw.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    // TP 2 / 4 / 8 ranks (first and last), and a ragged slice of two scale tiles
    for (const auto [n0, n1] : {std::pair<int64_t, int64_t>{0, kOut / 2}, {kOut / 2, kOut}, {0, kOut / 4},
                                {3 * kOut / 4, kOut}, {0, kOut / 8}, {7 * kOut / 8, kOut}, {64, 128}}) {
      SCOPED_TRACE("rows " + std::to_string(rows) + " slice [" + std::to_string(n0) + ", " + std::to_string(n1) + ")");
      Fp8View s = whole;
      s.w = whole.w + n0 * kIn;
      s.scale = whole.scale + (n0 / kBlock) * ((kIn + kBlock - 1) / kBlock);
      s.out = n1 - n0;
      DeviceBuffer ds(sizeof(float) * rows * s.out);
      ASSERT_EQ(fp8_linear(dx.as<float>(), rows, s, kAct, ds.as<float>(), nullptr), cudaSuccess);
      std::vector<float> ys(rows * s.out);
      ASSERT_EQ(cudaMemcpy(ys.data(), ds.get(), ys.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
      int64_t differ = 0;
      for (int64_t r = 0; r < rows; ++r)
        differ += std::memcmp(&ys[r * s.out], &yw[r * kOut + n0], sizeof(float) * s.out) != 0;
      EXPECT_EQ(differ, 0) << "rows of the slice launch differ from the whole launch's columns";
    }
  }
}

// The shared expert's gate and up in one launch equal two fp8_linear launches bit for bit (decode
// row counts, and 40 rows where the pair falls back to the prefill tiles); mismatched shapes refused.
TEST(LinearCuda, Fp8PairEqualsTwoLaunches) {
  constexpr int64_t kOut = 2304, kIn = 5120, kRows = 40;  // V4.1 shared expert w1 / w3
  Fixture f;
  auto v1 = upload_now(random_fp8(kOut, kIn, 32, 61)->w, f.arena, "w1");
  auto v3 = upload_now(random_fp8(kOut, kIn, 32, 62)->w, f.arena, "w3");
  ASSERT_TRUE(v1.ok() && v3.ok());
  const std::vector<float> x = random_x(kRows, kIn, 63);
  DeviceBuffer dx(sizeof(float) * x.size()), da(sizeof(float) * kRows * kOut), du(sizeof(float) * kRows * kOut),
      pa(sizeof(float) * kRows * kOut), pu(sizeof(float) * kRows * kOut);
  ASSERT_EQ(cudaMemcpy(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  auto host = [](const DeviceBuffer& b, int64_t n) {
    std::vector<float> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), b.get(), n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  };
  for (const int64_t rows : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{13}, kRows}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    ASSERT_EQ(fp8_linear(dx.as<float>(), rows, *v1, 32, da.as<float>(), nullptr), cudaSuccess);
    ASSERT_EQ(fp8_linear(dx.as<float>(), rows, *v3, 32, du.as<float>(), nullptr), cudaSuccess);
    cudaMemset(pa.get(), 0xFF, pa.bytes());
    cudaMemset(pu.get(), 0xFF, pu.bytes());
    ASSERT_EQ(fp8_linear_pair(dx.as<float>(), rows, *v1, *v3, 32, pa.as<float>(), pu.as<float>(), nullptr), cudaSuccess);
    EXPECT_EQ(host(pa, rows * kOut), host(da, rows * kOut));
    EXPECT_EQ(host(pu, rows * kOut), host(du, rows * kOut));
  }
  Fp8View narrow = *v3;
  narrow.out = kOut - 32;
  EXPECT_EQ(fp8_linear_pair(dx.as<float>(), 1, *v1, narrow, 32, pa.as<float>(), pu.as<float>(), nullptr),
            cudaErrorInvalidValue);
}

// The streaming row kernel (the default at up to 32 rows) against one CTA per 16-column tile, bit
// for bit: single FP8 / FP4 linears (widths with a partial last tile, act blocks 32 and 128, K split
// into 1-16 slices) and the FP8 pair, rows 1-32, ring depths 2 (the default), 3 and 4.
TEST(LinearCuda, StreamingKernelEqualsRowTiles) {
  struct Shape { int64_t out, in; bool fp4; int act_block; };
  Fixture f;
  auto host = [](const DeviceBuffer& b, int64_t n) {
    std::vector<float> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), b.get(), n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  };
  for (const Shape sh : {Shape{1280, 5120, false, 32}, Shape{520, 2304, false, 128}, Shape{4096, 1280, false, 32},
                         Shape{200, 256, false, 32}, Shape{2304, 5120, true, 32}, Shape{5120, 2304, true, 32}}) {
    SCOPED_TRACE("out " + std::to_string(sh.out) + " in " + std::to_string(sh.in) + (sh.fp4 ? " fp4" : " fp8"));
    const size_t mark = f.arena.mark();
    StatusOr<Fp8View> v8 = Fp8View{};
    StatusOr<Fp4View> v4 = Fp4View{};
    if (sh.fp4) v4 = upload_now(random_fp4(sh.out, sh.in, 71)->w, f.arena, "fp4");
    else v8 = upload_now(random_fp8(sh.out, sh.in, 128, 71)->w, f.arena, "fp8");
    ASSERT_TRUE(v8.ok() && v4.ok());
    const std::vector<float> x = random_x(32, sh.in, 72);
    DeviceBuffer dx(sizeof(float) * x.size()), dy(sizeof(float) * 32 * sh.out);
    ASSERT_EQ(cudaMemcpy(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
    auto run = [&](int64_t rows) {
      cudaMemset(dy.get(), 0xFF, dy.bytes());
      EXPECT_EQ(sh.fp4 ? fp4_linear(dx.as<float>(), rows, *v4, sh.act_block, dy.as<float>(), nullptr)
                       : fp8_linear(dx.as<float>(), rows, *v8, sh.act_block, dy.as<float>(), nullptr),
                cudaSuccess);
      return host(dy, 32 * sh.out);
    };
    for (const int64_t rows : {1, 3, 8, 13, 32}) {
      set_lowp_row_kernel(RowKernel::tiles);
      const std::vector<float> tiles = run(rows);
      for (const int depth : {0, 3, 4}) {
        SCOPED_TRACE("rows " + std::to_string(rows) + " depth " + std::to_string(depth));
        set_lowp_row_kernel(RowKernel::stream);
        set_lowp_layout_override(0, depth);
        const std::vector<float> stream = run(rows);
        set_lowp_layout_override(0, 0);
        EXPECT_EQ(std::memcmp(stream.data(), tiles.data(), sizeof(float) * tiles.size()), 0);
      }
    }
    f.arena.reset(mark);
  }
  // The pair: w1 and w3 of the shared expert's shape.
  constexpr int64_t kOut = 2304, kIn = 5120;
  auto v1 = upload_now(random_fp8(kOut, kIn, 32, 73)->w, f.arena, "w1");
  auto v3 = upload_now(random_fp8(kOut, kIn, 32, 74)->w, f.arena, "w3");
  ASSERT_TRUE(v1.ok() && v3.ok());
  const std::vector<float> x = random_x(32, kIn, 75);
  DeviceBuffer dx(sizeof(float) * x.size()), da(sizeof(float) * 32 * kOut), du(sizeof(float) * 32 * kOut);
  ASSERT_EQ(cudaMemcpy(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
  for (const int64_t rows : {1, 5, 32}) {
    std::vector<float> ref[2];
    for (const bool on : {false, true}) {
      set_lowp_row_kernel(on ? RowKernel::stream : RowKernel::tiles);
      cudaMemset(da.get(), 0xFF, da.bytes());
      cudaMemset(du.get(), 0xFF, du.bytes());
      ASSERT_EQ(fp8_linear_pair(dx.as<float>(), rows, *v1, *v3, 32, da.as<float>(), du.as<float>(), nullptr), cudaSuccess);
      std::vector<float> a = host(da, 32 * kOut), u = host(du, 32 * kOut);
      a.insert(a.end(), u.begin(), u.end());
      ref[on] = std::move(a);
    }
    EXPECT_EQ(std::memcmp(ref[0].data(), ref[1].data(), sizeof(float) * ref[0].size()), 0) << "pair rows " << rows;
  }
  set_lowp_row_kernel(RowKernel::automatic);
}

TEST(LinearCuda, RefusesBadShapesAndNamesTheLaunch) {
  Fp8View w;
  w.out = 4, w.in = 40;
  EXPECT_EQ(fp8_linear(nullptr, 1, w, 32, nullptr, nullptr), cudaErrorInvalidValue);
  const Status s = launch_status(cudaErrorInvalidValue, "fp8_linear", shape_text({{"rows", 1}, {"out", 4}, {"in", 40}}));
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("fp8_linear [rows=1, out=4, in=40]"), std::string::npos) << s.message();
}

// The device takes stored bytes as they are, so a value its format cannot hold has no bytes to reach it: the
// exact encoders that make stored bytes refuse it, naming the element. What the upload can be handed wrongly
// is a stored tensor of another kind, or scales that do not tile the weight; it refuses both by name.
TEST(UploadCuda, RefusesValuesTheFormatCannotHold) {
  auto h = random_fp8(32, 32, 32, 5);
  std::vector<float> w = h->values;
  w[7] = 0.3f;  // not an e4m3 value
  auto codes = encode_e4m3(w);
  ASSERT_FALSE(codes.ok());
  EXPECT_NE(codes.status().message().find("element 7 "), std::string::npos) << codes.status().to_string();
  auto h4 = random_fp4(2, 32, 6);
  std::vector<float> s4 = h4->scales;
  s4[1] = 0.75f;  // not a power of two
  auto scales = encode_ue8m0(s4);
  ASSERT_FALSE(scales.ok());
  EXPECT_NE(scales.status().message().find("element 1 "), std::string::npos) << scales.status().to_string();

  Arena arena(1 << 20);
  cpu::held_testing::HeldWeights held;
  family::Fp8Linear bf16_codes = h->w;
  bf16_codes.weight = held.bf16(32, 32, h->values).weight;  // the same values stored bf16
  auto v = upload_now(bf16_codes, arena, "blk.0.wq_a");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("'blk.0.wq_a': stored as BF16"), std::string::npos) << v.status().to_string();
  family::Fp8Linear short_scales = h->w;
  short_scales.scale = h4->w.scale;  // 2 scale bytes for one 32x32 tile
  auto s = upload_now(short_scales, arena, "blk.0.wkv");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("'blk.0.wkv': 2 scale bytes"), std::string::npos) << s.status().to_string();
  family::Fp4Linear fp8_codes = h4->w;
  fp8_codes.weight = h->w.weight;  // e4m3 codes where packed e2m1 belongs
  auto v4 = upload_now(fp8_codes, arena, "e");
  ASSERT_FALSE(v4.ok());
  EXPECT_NE(v4.status().message().find("'e': stored as F8_E4M3"), std::string::npos) << v4.status().to_string();
}

}  // namespace
}  // namespace dsv4::cuda
