// EXL3 GEMM on CUDA: every ExLlamaV3 fixture within the fp32 tolerance of y_ref, bit-identical rows
// whatever the number of rows in the launch (batch invariance), and the grouped routed experts equal
// to their per-expert products and the CPU SwiGLU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "backends/cpu/moe.h"
#include "backends/cuda/exl3/exl3_device.h"
#include "core/bf16.h"
#include "formats/exl3/half.h"
#include "formats/exl3/pack.h"

namespace dsv4::cuda {
namespace {

// The ExLlamaV3 fixtures in the source tree; DSV4_EXL3_FIXTURES names the folder instead on a GPU machine
// that received only the binaries.
const std::string kFixtureDir = std::getenv("DSV4_EXL3_FIXTURES") ? std::getenv("DSV4_EXL3_FIXTURES")
                                                                  : DSV4_SOURCE_DIR "/tests/data/exl3";

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
exl3::Linear random_layer(int64_t in, int64_t out, int bits, int codebook, uint64_t seed) {
  exl3::Linear layer;
  layer.name = "synthetic";
  layer.in_features = in;
  layer.out_features = out;
  layer.bits = bits;
  layer.codebook = static_cast<exl3::Codebook>(codebook);
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> trellis(in / 16 * (out / 16) * 16 * bits);
  for (auto& w : trellis) w = static_cast<uint16_t>(rng());
  layer.trellis = std::move(trellis);
  std::uniform_real_distribution<double> scale(0.005, 0.02);
  for (int64_t i = 0; i < in; ++i) layer.suh.push_back(exl3::double_to_half_bits((rng() & 1 ? -1 : 1) * scale(rng)));
  for (int64_t i = 0; i < out; ++i)
    layer.svh.push_back(exl3::double_to_half_bits((rng() & 1 ? -1 : 1) * scale(rng) * 50));
  return layer;
}

TEST(Exl3Cuda, ExpertShapeBatchInvariantAndCloseToCpu) {
  for (int codebook = 0; codebook < 3; ++codebook) {
    exl3::Linear layer = random_layer(5120, 2304, 3, codebook, 1234 + codebook);
    std::mt19937_64 rng(99 + codebook);
    auto device = upload(layer);
    ASSERT_TRUE(device.ok()) << device.status().to_string();
    const int64_t rows = 32;
    std::vector<float> x(rows * layer.in_features);
    std::normal_distribution<float> normal(0.f, 1.f);
    for (auto& v : x) v = normal(rng);
    const std::vector<float> y_all = run_gemm(*device, x, rows);
    for (int64_t r : {1, 3, 8, 16}) {
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

// Grouped routed experts against the composition of tested pieces: a and u (read back from the
// scratch) bit-identical to bf16(exl3_gemm) of each pair's zero-padded row; out against exl3_gemm of
// the CPU SwiGLU of those a, u (zero past the logical width); and each pair's output independent of
// the other pairs in the launch. Cases: one kind everywhere; w3 of another kind than w1 (separate
// gate and up launches); experts of 2 and 3 bits mixed in every projection with logical widths that
// are not multiples of 128 (the padding of a pack whose dims are not).
TEST(Exl3Cuda, RoutedExpertsMatchPerExpertProducts) {
  const int64_t Dp = 1024, Ip = 512, E = 5, rows = 7;
  const float limit = 3.f;
  enum class Case { alike, w3_other_kind, mixed_bits_logical };
  for (const Case c : {Case::alike, Case::w3_other_kind, Case::mixed_bits_logical}) {
    SCOPED_TRACE(c == Case::alike ? "one kind" : c == Case::w3_other_kind ? "w3 another kind" : "mixed bits, logical dims");
    const bool logical = c == Case::mixed_bits_logical;
    const int64_t D = logical ? 998 : Dp, I = logical ? 430 : Ip;  // not multiples of 4: the scalar edge paths
    std::vector<exl3::Linear> h1, h3, h2;
    std::vector<Exl3DeviceLinear> d1, d3, d2;
    Exl3ExpertsView X;
    X.gate_up_same_kind = c != Case::w3_other_kind;
    for (int e = 0; e < E; ++e) {
      const int b = c == Case::mixed_bits_logical ? 2 + e % 2 : 2;
      h1.push_back(random_layer(Dp, Ip, b, 2, 10 + e));
      h3.push_back(random_layer(Dp, Ip, c == Case::w3_other_kind ? 3 : b, c == Case::w3_other_kind ? 0 : 2, 20 + e));
      h2.push_back(random_layer(Ip, Dp, c == Case::mixed_bits_logical ? 5 - b : 3, 2, 30 + e));
      int k = 0;
      for (auto [h, d] : {std::pair{&h1, &d1}, std::pair{&h3, &d3}, std::pair{&h2, &d2}}) {
        auto up = upload(h->back());
        ASSERT_TRUE(up.ok()) << up.status().to_string();
        X.kinds[k++] |= exl3_kind_bit(up->weights.bits, up->weights.codebook);
        d->push_back(std::move(*up));
      }
    }
    auto table = [&](const std::vector<Exl3DeviceLinear>& d) {
      std::vector<Exl3Weights> w;
      for (const auto& l : d) w.push_back(l.weights);
      DeviceBuffer buf(sizeof(Exl3Weights) * w.size());
      cudaMemcpy(buf.get(), w.data(), buf.bytes(), cudaMemcpyHostToDevice);
      return buf;
    };
    DeviceBuffer t1 = table(d1), t3 = table(d3), t2 = table(d2);
    X.w1 = t1.as<Exl3Weights>();
    X.w3 = t3.as<Exl3Weights>();
    X.w2 = t2.as<Exl3Weights>();
    X.n_experts = E;
    X.dim = D;
    X.inter = I;
    X.dim_p = Dp;
    X.inter_p = Ip;

    // Each row picks 2 distinct experts; pairs sorted by (expert, row).
    std::mt19937_64 rng(5);
    std::vector<std::pair<int32_t, int32_t>> pairs;
    for (int32_t r = 0; r < rows; ++r) {
      const int32_t e0 = int32_t(rng() % E), e1 = int32_t((e0 + 1 + rng() % (E - 1)) % E);
      pairs.emplace_back(e0, r);
      pairs.emplace_back(e1, r);
    }
    std::sort(pairs.begin(), pairs.end());
    const int64_t P = int64_t(pairs.size());
    std::vector<int32_t> pe, pr;
    std::vector<float> pw;
    for (auto [e, r] : pairs) pe.push_back(e), pr.push_back(r), pw.push_back(0.25f + 0.125f * float(rng() % 4));
    std::vector<float> x(rows * D);  // logical width
    std::normal_distribution<float> normal(0.f, 1.f);
    for (auto& v : x) v = round_bf16(normal(rng) * 4.f);

    auto run_grouped = [&](int64_t first, int64_t count, std::vector<float>& a, std::vector<float>& u) {
      DeviceBuffer dx(sizeof(float) * x.size()), dpe(4 * count), dpr(4 * count), dpw(4 * count);
      DeviceBuffer scratch(exl3_routed_experts_scratch_bytes(count, X)), out(sizeof(float) * count * D);
      cudaMemcpy(dx.get(), x.data(), dx.bytes(), cudaMemcpyHostToDevice);
      cudaMemcpy(dpe.get(), pe.data() + first, 4 * count, cudaMemcpyHostToDevice);
      cudaMemcpy(dpr.get(), pr.data() + first, 4 * count, cudaMemcpyHostToDevice);
      cudaMemcpy(dpw.get(), pw.data() + first, 4 * count, cudaMemcpyHostToDevice);
      cudaMemset(out.get(), 0xFF, out.bytes());
      EXPECT_EQ(exl3_routed_experts(dx.as<float>(), dpr.as<int32_t>(), dpe.as<int32_t>(), dpw.as<float>(), count, X,
                                    limit, scratch.get(), out.as<float>(), nullptr),
                cudaSuccess);
      std::vector<float> o(count * D);
      a.resize(count * Ip);
      u.resize(count * Ip);
      EXPECT_EQ(cudaMemcpy(o.data(), out.get(), out.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
      cudaMemcpy(a.data(), scratch.get(), sizeof(float) * count * Ip, cudaMemcpyDeviceToHost);
      cudaMemcpy(u.data(), static_cast<char*>(scratch.get()) + sizeof(float) * count * Ip, sizeof(float) * count * Ip,
                 cudaMemcpyDeviceToHost);
      return o;
    };
    std::vector<float> a, u;
    const std::vector<float> out = run_grouped(0, P, a, u);

    double num = 0, den = 0;
    for (int64_t p = 0; p < P; ++p) {
      const int e = pe[p], r = pr[p];
      std::vector<float> xr(Dp, 0.f);  // the row zero-padded to the weight's width
      std::copy(x.begin() + r * D, x.begin() + (r + 1) * D, xr.begin());
      std::vector<float> ar = run_gemm(d1[e], xr, 1), ur = run_gemm(d3[e], xr, 1);
      for (auto& v : ar) v = round_bf16(v);
      for (auto& v : ur) v = round_bf16(v);
      EXPECT_EQ(std::memcmp(ar.data(), a.data() + p * Ip, sizeof(float) * Ip), 0) << "a of pair " << p;
      EXPECT_EQ(std::memcmp(ur.data(), u.data() + p * Ip, sizeof(float) * Ip), 0) << "u of pair " << p;
      std::vector<float> h(Ip, 0.f);  // zero past the logical width
      cpu::swiglu_clamped<float>(ar.data(), ur.data(), I, pw[p], limit, h.data());
      const std::vector<float> y = run_gemm(d2[e], h, 1);
      for (int64_t n = 0; n < D; ++n) {
        const double ref = round_bf16(y[n]), got = out[p * D + n];
        num += (got - ref) * (got - ref);
        den += ref * ref;
      }
    }
    // The device SwiGLU uses expf where the CPU uses std::exp: an h element may land one bf16 step
    // apart (2^-8 relative) where the two round differently, moving out far below 1e-3 NRMS.
    EXPECT_LE(std::sqrt(num / den), 1e-3);
    EXPECT_GT(den, 0.0);

    // The pairs of the middle expert alone give the same bits as inside the full launch.
    const int64_t first = std::find(pe.begin(), pe.end(), pe[P / 2]) - pe.begin();
    const int64_t count = std::count(pe.begin(), pe.end(), pe[P / 2]);
    std::vector<float> a2, u2;
    const std::vector<float> part = run_grouped(first, count, a2, u2);
    EXPECT_EQ(std::memcmp(part.data(), out.data() + first * D, sizeof(float) * count * D), 0);
  }
}

}  // namespace
}  // namespace dsv4::cuda
