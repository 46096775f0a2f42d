// Speed of the CUDA linears and grouped routed experts on the V4.1 full-width shapes at 1, 8 and
// 32 rows, against the memory floor: (weight + scale bytes) / the device-to-device copy bandwidth
// measured in the same run (weights rotate through copies > 2x the L2 so every call reads HBM);
// and prefill chunks (2K-8K rows) in TFLOP/s against cuBLAS's dense FP8 rate (bf16 lines: bf16 rate)
// measured in the run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/runtime/dense_rate.h"
#include "backends/cuda/runtime/device_buffer.h"
#include "backends/cuda/kernels/linear/linear.cuh"
#include "backends/cuda/kernels/block/moe_experts.cuh"
#include "bench_device.h"
#include "graph_timing.h"
#include "routing.h"

namespace {

using namespace dsv4::cuda;

std::vector<DeviceBuffer> g_keep;  // everything allocated lives for the whole run

// Device bytes filled from a random host pattern (starting at a seed-dependent offset), with `fix`
// applied per byte when given.
uint8_t* device_random(size_t bytes, uint32_t seed, uint8_t (*fix)(uint8_t) = nullptr) {
  static std::vector<uint8_t> pattern;
  constexpr size_t kChunk = size_t(32) << 20;
  if (pattern.empty()) {
    pattern.resize(2 * kChunk);
    std::mt19937 rng(1234);
    for (auto& b : pattern) b = static_cast<uint8_t>(rng());
  }
  const size_t off = (size_t(seed) * 7919) % kChunk;
  std::vector<uint8_t> fixed;
  const uint8_t* src = pattern.data() + off;
  if (fix) {
    fixed.assign(src, src + std::min(bytes, kChunk));
    for (auto& b : fixed) b = fix(b);
    src = fixed.data();
  }
  g_keep.emplace_back(std::max<size_t>(bytes, 16));
  uint8_t* d = g_keep.back().as<uint8_t>();
  if (!d) { std::fprintf(stderr, "out of device memory\n"); std::exit(1); }
  for (size_t o = 0; o < bytes; o += kChunk)
    CHECK_CUDA(cudaMemcpy(d + o, src, std::min(kChunk, bytes - o), cudaMemcpyHostToDevice));
  return d;
}

uint8_t scale_byte(uint8_t b) { return static_cast<uint8_t>(120 + b % 8); }  // 2^-7 .. 2^0
uint8_t bf16_hi(uint8_t b) { return static_cast<uint8_t>(0x3C + (b & 1)); }  // keeps bf16 values small and finite

double copy_bandwidth() {
  const size_t bytes = size_t(2) << 30;
  DeviceBuffer a(bytes), b(bytes);
  CHECK_CUDA(cudaMemset(a.get(), 1, bytes));
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  for (int i = 0; i < 3; ++i) CHECK_CUDA(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice));
  float best = 1e30f;
  for (int i = 0; i < 10; ++i) {
    cudaEventRecord(t0);
    CHECK_CUDA(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice));
    cudaEventRecord(t1);
    cudaEventSynchronize(t1);
    float ms;
    cudaEventElapsedTime(&ms, t0, t1);
    best = std::min(best, ms);
  }
  return 2.0 * bytes / (best * 1e-3);  // read + write
}

// Median microseconds per call of fn(i) (i = call index, for rotating weight copies), timed as a
// CUDA graph of `calls` launches so launch overhead is not counted.
double time_us(const std::function<void(int, cudaStream_t)>& fn, int calls = 40) {
  return dsv4::bench::graph_median_us(fn, calls, 5);
}

double g_bw = 0;
// DSV4_BENCH_ROWS1=1: rows 1 only (layout sweeps); DSV4_BENCH_ROWS=8,16,...: those row counts.
std::vector<int> rows_list(std::vector<int> all) {
  if (std::getenv("DSV4_BENCH_ROWS1")) return {1};
  if (const char* list = std::getenv("DSV4_BENCH_ROWS")) {
    std::vector<int> v;
    for (const char* p = list; *p;) {
      char* end = nullptr;
      const long n = std::strtol(p, &end, 10);
      if (end == p) break;
      if (n > 0) v.push_back(static_cast<int>(n));
      p = *end == ',' ? end + 1 : end;
    }
    if (!v.empty()) return v;
  }
  return all;
}

void report(const char* kind, const char* name, int rows, double bytes, double us) {
  const double floor_us = bytes / g_bw * 1e6;
  std::printf("%-6s %-26s rows %3d  %8.1f MB  %9.2f us  floor %8.2f us  x%5.2f  %7.0f GB/s\n", kind, name, rows,
              bytes / 1e6, us, floor_us, us / floor_us, bytes / us / 1e3);
}

// DSV4_BENCH_HOT=1: one weight copy, so every call after the first reads its weights from L2
// (separates the kernels' own latency from DRAM's).
bool hot() { return std::getenv("DSV4_BENCH_HOT") != nullptr; }
int copies_for(double bytes) { return hot() ? 1 : std::max(2, static_cast<int>(std::ceil(256e6 / bytes))); }
// DSV4_BENCH_ONLY=a,b,...: only the lines whose name contains one of the texts.
bool wanted(const char* name) {
  const char* only = std::getenv("DSV4_BENCH_ONLY");
  if (!only) return true;
  const std::string list = only, n = name;
  for (size_t a = 0; a <= list.size();) {
    size_t b = list.find(',', a);
    if (b == std::string::npos) b = list.size();
    if (b > a && n.find(list.substr(a, b - a)) != std::string::npos) return true;
    a = b + 1;
  }
  return false;
}

void bench_fp8(const char* name, int64_t out, int64_t in) {
  if (!wanted(name)) return;
  const double bytes = double(out) * in + double((out + 31) / 32) * ((in + 31) / 32);
  const int nc = copies_for(bytes);
  std::vector<Fp8View> w(nc);
  for (int c = 0; c < nc; ++c)
    w[c] = Fp8View{device_random(out * in, 11 + c), device_random(((out + 31) / 32) * ((in + 31) / 32), 5 + c, scale_byte),
                   out, in, 32};
  for (int rows : rows_list({1, 8, 32})) {
    float* x = reinterpret_cast<float*>(device_random(sizeof(float) * rows * in, 3, bf16_hi));
    float* y = reinterpret_cast<float*>(device_random(sizeof(float) * rows * out, 4));
    const double us = time_us([&](int i, cudaStream_t s) { CHECK_CUDA(fp8_linear(x, rows, w[i % nc], 32, y, s)); });
    report("fp8", name, rows, bytes, us);
  }
}

// The shared expert's w1 and w3 in one fp8_linear_pair launch (bytes of both weights).
void bench_fp8_pair(const char* name, int64_t out, int64_t in) {
  if (!wanted(name)) return;
  const double one = double(out) * in + double((out + 31) / 32) * ((in + 31) / 32);
  const int nc = copies_for(2 * one);
  std::vector<Fp8View> w1(nc), w3(nc);
  for (int c = 0; c < nc; ++c) {
    w1[c] = Fp8View{device_random(out * in, 41 + c), device_random(((out + 31) / 32) * ((in + 31) / 32), 5 + c, scale_byte),
                    out, in, 32};
    w3[c] = Fp8View{device_random(out * in, 71 + c), device_random(((out + 31) / 32) * ((in + 31) / 32), 6 + c, scale_byte),
                    out, in, 32};
  }
  for (int rows : rows_list({1, 8, 32})) {
    float* x = reinterpret_cast<float*>(device_random(sizeof(float) * rows * in, 3, bf16_hi));
    float* y1 = reinterpret_cast<float*>(device_random(sizeof(float) * rows * out, 4));
    float* y3 = reinterpret_cast<float*>(device_random(sizeof(float) * rows * out, 4));
    const double us = time_us([&](int i, cudaStream_t s) {
      CHECK_CUDA(fp8_linear_pair(x, rows, w1[i % nc], w3[i % nc], 32, y1, y3, s));
    });
    report("fp8", name, rows, 2 * one, us);
  }
}

void bench_fp4(const char* name, int64_t out, int64_t in) {
  if (!wanted(name)) return;
  const double bytes = double(out) * in / 2 + double(out) * (in / 32);
  const int nc = copies_for(bytes);
  std::vector<Fp4View> w(nc);
  for (int c = 0; c < nc; ++c)
    w[c] = Fp4View{device_random(out * in / 2, 21 + c), device_random(out * (in / 32), 7 + c, scale_byte), out, in};
  for (int rows : rows_list({1, 8, 32})) {
    float* x = reinterpret_cast<float*>(device_random(sizeof(float) * rows * in, 3, bf16_hi));
    float* y = reinterpret_cast<float*>(device_random(sizeof(float) * rows * out, 4));
    const double us = time_us([&](int i, cudaStream_t s) { CHECK_CUDA(fp4_linear(x, rows, w[i % nc], 32, y, s)); });
    report("fp4", name, rows, bytes, us);
  }
}

void bench_bf16(const char* name, int64_t out, int64_t in, bool f32_out) {
  if (!wanted(name)) return;
  const double bytes = double(out) * in * 2;
  const int nc = std::min(copies_for(bytes), 8);
  std::vector<Bf16View> w(nc);
  for (int c = 0; c < nc; ++c)
    w[c] = Bf16View{reinterpret_cast<const uint16_t*>(device_random(out * in * 2, 31 + c, bf16_hi)), out, in};
  for (int rows : rows_list({1, 8, 32})) {
    float* x = reinterpret_cast<float*>(device_random(sizeof(float) * rows * in, 3, bf16_hi));
    float* y = reinterpret_cast<float*>(device_random(sizeof(float) * rows * out, 4));
    const double us = time_us([&](int i, cudaStream_t s) {
      CHECK_CUDA(f32_out ? f32_linear(x, rows, w[i % nc], y, s) : bf16_linear(x, rows, w[i % nc], y, s));
    }, f32_out ? 10 : 40);
    report(f32_out ? "f32" : "bf16", name, rows, bytes, us);
  }
}

// attention's grouped wo_a in one launch: G weights of [O, in], x [G, rows, in] -> y [rows, G O].
void bench_bf16_grouped(const char* name, int64_t G, int64_t O, int64_t in) {
  if (!wanted(name)) return;
  const double bytes = double(G) * O * in * 2;
  const int nc = std::min(copies_for(bytes), 8);
  std::vector<Bf16View> w(nc);
  for (int c = 0; c < nc; ++c)
    w[c] = Bf16View{reinterpret_cast<const uint16_t*>(device_random(G * O * in * 2, 41 + c, bf16_hi)), G * O, in};
  for (int rows : rows_list({1, 8, 32})) {
    float* x = reinterpret_cast<float*>(device_random(sizeof(float) * G * rows * in, 3, bf16_hi));
    float* y = reinterpret_cast<float*>(device_random(sizeof(float) * rows * G * O, 4));
    const double us = time_us([&](int i, cudaStream_t s) { CHECK_CUDA(bf16_grouped_linear(x, rows, w[i % nc], G, y, s)); });
    report("bf16", name, rows, bytes, us);
  }
}

// Routed experts of one layer: E = 384 experts resident (V4.1: D = 5120, I = 2304), each row routed
// to 6 distinct random ones. The device views of every expert's w1, w3, w2, generated once.
constexpr int64_t kExpertsE = 384, kExpertsD = 5120, kExpertsI = 2304;
struct ExpertViews {
  const Fp4View *d1 = nullptr, *d3 = nullptr, *d2 = nullptr;
};
ExpertViews expert_views() {
  const int64_t E = kExpertsE, D = kExpertsD, I = kExpertsI;
  static ExpertViews ev;  // generated once (layout sweeps and the prefill lines call this again)
  if (ev.d1) return ev;
  std::vector<Fp4View> v1(E), v3(E), v2(E);
  for (int64_t e = 0; e < E; ++e) {
    v1[e] = Fp4View{device_random(I * D / 2, 100 + e), device_random(I * (D / 32), 9, scale_byte), I, D};
    v3[e] = Fp4View{device_random(I * D / 2, 500 + e), device_random(I * (D / 32), 10, scale_byte), I, D};
    v2[e] = Fp4View{device_random(D * I / 2, 900 + e), device_random(D * (I / 32), 11, scale_byte), D, I};
  }
  auto up = [&](const std::vector<Fp4View>& v) {
    auto* d = device_random(sizeof(Fp4View) * E, 0);
    CHECK_CUDA(cudaMemcpy(d, v.data(), sizeof(Fp4View) * E, cudaMemcpyHostToDevice));
    return reinterpret_cast<const Fp4View*>(d);
  };
  ev.d1 = up(v1), ev.d3 = up(v3), ev.d2 = up(v2);
  return ev;
}

// One random routing of `rows` rows to 6 of the 384 experts on the device.
struct DeviceRouting {
  int32_t *row, *expert;
  float* weight;
  int64_t n;
  int distinct;  // experts with at least one pair
};
DeviceRouting device_routing(std::mt19937& rng, int rows) {
  const dsv4::bench::RoutedPairs t = dsv4::bench::random_routing(rng, kExpertsE, rows, 6);
  const std::vector<int32_t>& pr = t.row;
  const std::vector<int32_t>& pe = t.expert;
  std::vector<float> pw(pe.size(), 0.25f);
  int distinct = 0;
  for (size_t i = 0; i < pe.size(); ++i) distinct += i == 0 || pe[i] != pe[i - 1];
  auto* a = reinterpret_cast<int32_t*>(device_random(pr.size() * 4, 0));
  auto* b = reinterpret_cast<int32_t*>(device_random(pe.size() * 4, 0));
  auto* c = reinterpret_cast<float*>(device_random(pw.size() * 4, 0));
  CHECK_CUDA(cudaMemcpy(a, pr.data(), pr.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(b, pe.data(), pe.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(c, pw.data(), pw.size() * 4, cudaMemcpyHostToDevice));
  return DeviceRouting{a, b, c, static_cast<int64_t>(pe.size()), distinct};
}

void bench_experts() {
  if (!wanted("routed experts")) return;
  const int64_t D = kExpertsD, I = kExpertsI;
  const double expert_bytes = 3.0 * (double(I) * D / 2 + double(I) * (D / 32));
  const ExpertViews ev = expert_views();
  const Fp4View *d1 = ev.d1, *d3 = ev.d3, *d2 = ev.d2;
  std::mt19937 rng(77);
  for (int rows : rows_list({1, 8, 32, 512})) {  // 512 rows: 3,072 pairs on the prefill tiles
    // several routings so consecutive calls touch different experts (no L2 reuse across calls)
    const int kRoutings = 8;
    std::vector<std::tuple<int32_t*, int32_t*, float*, int64_t, double>> routes;
    for (int k = 0; k < kRoutings; ++k) {
      const DeviceRouting r = device_routing(rng, rows);
      routes.emplace_back(r.row, r.expert, r.weight, r.n, r.distinct * expert_bytes);
    }
    const int64_t n_pairs = std::get<3>(routes[0]);
    float* x = reinterpret_cast<float*>(device_random(sizeof(float) * rows * D, 3, bf16_hi));
    float* scratch = reinterpret_cast<float*>(device_random(sizeof(float) * (n_pairs * 3 * I + 64), 0));
    float* out = reinterpret_cast<float*>(device_random(sizeof(float) * n_pairs * D, 0));
    double bytes = 0;
    for (auto& r : routes) bytes += std::get<4>(r);
    bytes /= kRoutings;
    const double us = time_us([&](int i, cudaStream_t s) {
      auto& [pr, pe, pw, n, b] = routes[i % kRoutings];
      CHECK_CUDA(moe_routed_experts(x, pr, pe, pw, n, d1, d3, d2, D, I, 32, 10.f, scratch, out, s));
    }, rows > 32 ? 8 : 40);
    report("moe", "routed experts x6 per row", rows, bytes, us);
  }
}

// One prefill line: the call on the 64 x 64 tiles, on the many-row GEMM's mma.sync form and on its warpgroup-MMA
// form (where the device has it) in the same run (set_lowp_gemm, set_lowp_gemm_wgmma): flop per call, TFLOP/s,
// share of the dense FP8 rate (`rate`) and the speedup of the default (mma.sync) GEMM over the tiles.
void prefill_line(const char* kind, const char* name, int rows, double flop, double rate,
                  const std::function<void(int, cudaStream_t)>& fn, int calls = 5) {
  set_lowp_gemm(false);
  const double us_tiles = time_us(fn, calls);
  set_lowp_gemm(true);
  set_lowp_gemm_wgmma(false);
  const double us_sync = time_us(fn, calls);
  set_lowp_gemm_wgmma(true);
  const bool wg = lowp_gemm_wgmma_active();
  const double us_wg = wg ? time_us(fn, calls) : 0.0;
  set_lowp_gemm_wgmma(false);  // the default again
  auto col = [&](const char* label, double us) {
    const double tf = flop / (us * 1e-6);
    std::printf(" | %s %10.1f us %7.1f TFLOP/s x%.3f", label, us, tf / 1e12, tf / rate);
  };
  std::printf("%-6s %-26s rows %5d", kind, name, rows);
  col("tiles", us_tiles);
  col("gemm", us_sync);
  if (wg) col("wgmma", us_wg);
  std::printf(" | x%.2f\n", us_tiles / us_sync);
}

// Prefill chunks of routed experts (6 per row): 3 x pairs x I x D multiply-adds per call.
void bench_experts_prefill(double rate) {
  if (!wanted("routed experts prefill")) return;
  const int64_t D = kExpertsD, I = kExpertsI;
  const ExpertViews ev = expert_views();
  std::mt19937 rng(91);
  for (int rows : rows_list({512, 2048, 8192})) {
    const DeviceRouting r = device_routing(rng, rows);
    float* x = reinterpret_cast<float*>(device_random(sizeof(float) * rows * D, 3, bf16_hi));
    DeviceBuffer scratch(sizeof(float) * (r.n * 3 * I + 64)), out(sizeof(float) * r.n * D);
    const double flop = 2.0 * 3.0 * double(r.n) * I * D;
    prefill_line("moe", "routed experts prefill x6", rows, flop, rate, [&](int, cudaStream_t s) {
      CHECK_CUDA(moe_routed_experts(x, r.row, r.expert, r.weight, r.n, ev.d1, ev.d3, ev.d2, D, I, 32, 10.f,
                                    scratch.as<float>(), out.as<float>(), s));
    }, 3);
  }
}

// Prefill chunks through the same linears: rows x out x in multiply-adds per call, on the 64 x 64
// tiles and on the many-row GEMM (DSV4_BENCH_ROWS: other row counts).
void bench_prefill(double rate, double rate16) {
  struct Shape { const char* name; int64_t out, in; bool fp4; };
  for (const Shape& sh : {Shape{"wq_a [1280, 5120]", 1280, 5120, false}, Shape{"wq_b [32768, 1280]", 32768, 1280, false},
                          Shape{"wo_b [5120, 8192]", 5120, 8192, false},
                          Shape{"shared w1/w3 [2304, 5120]", 2304, 5120, false},
                          Shape{"shared w2 [5120, 2304]", 5120, 2304, false},
                          Shape{"expert w1/w3 [2304, 5120]", 2304, 5120, true}}) {
    if (!wanted(sh.name)) continue;
    Fp8View w8{device_random(sh.out * sh.in, 11), device_random(((sh.out + 31) / 32) * ((sh.in + 31) / 32), 5, scale_byte),
               sh.out, sh.in, 32};
    Fp4View w4{device_random(sh.out * sh.in / 2, 21), device_random(sh.out * (sh.in / 32), 7, scale_byte), sh.out, sh.in};
    for (int rows : rows_list({512, 2048, 4096, 8192})) {
      float* x = reinterpret_cast<float*>(device_random(sizeof(float) * rows * sh.in, 3, bf16_hi));
      DeviceBuffer yb(sizeof(float) * rows * sh.out);
      prefill_line(sh.fp4 ? "fp4" : "fp8", sh.name, rows, 2.0 * rows * double(sh.out) * sh.in, rate,
                   [&](int, cudaStream_t s) {
                     CHECK_CUDA(sh.fp4 ? fp4_linear(x, rows, w4, 32, yb.as<float>(), s)
                                       : fp8_linear(x, rows, w8, 32, yb.as<float>(), s));
                   });
    }
  }
  // bf16 on tensor cores: the grouped wo_a (8 x [1024, 4096]) as one launch, and the router-sized
  // weights_proj-like narrow shape.
  struct B16 { const char* name; int64_t G, O, in; };
  for (const B16& sh : {B16{"bf16 wo_a grouped 8x[1024, 4096]", 8, 1024, 4096}, B16{"bf16 [512, 5120]", 1, 512, 5120}}) {
    if (!wanted(sh.name)) continue;
    const Bf16View w{reinterpret_cast<const uint16_t*>(device_random(sh.G * sh.O * sh.in * 2, 51, bf16_hi)), sh.G * sh.O, sh.in};
    for (int rows : {2048, 4096}) {
      float* x = reinterpret_cast<float*>(device_random(sizeof(float) * sh.G * rows * sh.in, 3, bf16_hi));
      DeviceBuffer yb(sizeof(float) * rows * sh.G * sh.O);
      const double us = time_us([&](int, cudaStream_t s) {
        CHECK_CUDA(bf16_grouped_linear(x, rows, w, sh.G, yb.as<float>(), s));
      }, 5);
      const double flop = 2.0 * rows * double(sh.G * sh.O) * sh.in, tf = flop / (us * 1e-6);
      std::printf("%-6s %-26s rows %5d  %10.1f us  %7.1f TFLOP/s  x%.3f of dense bf16\n", "bf16", sh.name, rows, us,
                  tf / 1e12, tf / rate16);
    }
  }
}

}  // namespace

int main() {
  const cudaDeviceProp prop = dsv4::bench::bench_device();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines out as measured, even if the run is cut short
  g_bw = copy_bandwidth();
  std::printf("device %s, %d SMs, L2 %d MB; D2D copy bandwidth %.0f GB/s (read + write)\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, g_bw / 1e9);
  if (std::getenv("DSV4_BENCH_SWEEP")) {  // the listed lines under each forced row-tile layout
    for (const auto [per, depth] : {std::pair{0, 0}, {1, 2}, {1, 3}, {1, 4}, {2, 2}, {2, 3}, {2, 4}, {4, 2}, {4, 3}}) {
      set_lowp_layout_override(per, depth);
      std::printf("layout: slices per warp %d, ring depth %d (0: planner)\n", per, depth);
      bench_fp8("wq_a [1280, 5120]", 1280, 5120);
      bench_fp8("wq_b [32768, 1280]", 32768, 1280);
      bench_fp8("wo_b [5120, 8192]", 5120, 8192);
      bench_experts();
    }
    set_lowp_layout_override(0, 0);
    return 0;
  }
  if (std::getenv("DSV4_BENCH_STREAM_SWEEP")) {  // the row lines on rows_tile, then on the streaming kernel by ring depth
    for (const auto [k, depth] : {std::pair{RowKernel::tiles, 0}, {RowKernel::stream, 2}, {RowKernel::stream, 3},
                                  {RowKernel::automatic, 0}}) {
      set_lowp_row_kernel(k);
      set_lowp_layout_override(0, depth);
      std::printf("row kernel: %s, ring depth %d (0: planner)\n",
                  k == RowKernel::tiles ? "one CTA per tile" : k == RowKernel::stream ? "streaming" : "automatic", depth);
      bench_fp8("wq_a [1280, 5120]", 1280, 5120);
      bench_fp8("wkv [512, 5120]", 512, 5120);
      bench_fp8("wq_b [32768, 1280]", 32768, 1280);
      bench_fp8("wo_b [5120, 8192]", 5120, 8192);
      bench_fp8_pair("shared w1+w3 pair [2 x 2304, 5120]", 2304, 5120);
      bench_fp8("shared w2 [5120, 2304]", 5120, 2304);
      bench_experts();
    }
    set_lowp_row_kernel(RowKernel::automatic);
    set_lowp_layout_override(0, 0);
    return 0;
  }
  if (std::getenv("DSV4_BENCH_TILE_SWEEP")) {  // the listed lines with the tile kernels from each row count on
    for (const int64_t t : {0, 4, 8, 16}) {
      set_lowp_tile_rows(t);
      set_bf16_tile_rows(t);
      std::printf("tile kernels above %lld rows (0: the defaults, FP8/FP4 32 and bf16 64)\n", static_cast<long long>(t));
      bench_fp8("wq_a [1280, 5120]", 1280, 5120);
      bench_fp8("wq_b [32768, 1280]", 32768, 1280);
      bench_fp8("wo_b [5120, 8192]", 5120, 8192);
      bench_fp8_pair("shared w1+w3 pair [2 x 2304, 5120]", 2304, 5120);
      bench_fp8("shared w2 [5120, 2304]", 5120, 2304);
      bench_bf16_grouped("wo_a grouped 8x[1024, 4096]", 8, 1024, 4096);
    }
    set_lowp_tile_rows(0);
    set_bf16_tile_rows(0);
    return 0;
  }
  bench_fp8("wq_a [1280, 5120]", 1280, 5120);
  bench_fp8("wkv [512, 5120]", 512, 5120);
  bench_fp8("wq_b [32768, 1280]", 32768, 1280);
  bench_fp8("wo_b [5120, 8192]", 5120, 8192);
  bench_fp8("shared w1/w3 [2304, 5120]", 2304, 5120);
  bench_fp8_pair("shared w1+w3 pair [2 x 2304, 5120]", 2304, 5120);
  bench_fp8("shared w2 [5120, 2304]", 5120, 2304);
  bench_fp4("expert w1/w3 [2304, 5120]", 2304, 5120);
  bench_fp4("expert w2 [5120, 2304]", 5120, 2304);
  bench_experts();
  bench_bf16("wo_a [8192, 4096]", 8192, 4096, false);
  bench_bf16_grouped("wo_a grouped 8x[1024, 4096]", 8, 1024, 4096);
  bench_bf16("head [129280, 5120]", 129280, 5120, true);
  if (!std::getenv("DSV4_BENCH_NO_PREFILL")) {
    // DSV4_BENCH_GEMM_ROWS=32|64|128: the many-row GEMM's row tile forced for every prefill line
    if (const char* t = std::getenv("DSV4_BENCH_GEMM_ROWS")) set_lowp_gemm_tile_rows(std::atoi(t));
    const double rate16 = dense_bf16_rate(), rate8 = dense_fp8_rate();
    std::printf("dense GEMM (cuBLAS, 8192^3): bf16 %.0f TFLOP/s, FP8 e4m3 %.0f TFLOP/s (FP8/FP4 lines: x of the FP8 rate)\n",
                rate16 / 1e12, rate8 / 1e12);
    bench_prefill(rate8, rate16);
    bench_experts_prefill(rate8);
  }
  return 0;
}
