// Throughput of the scalar codecs and block quantizers on the CPU (elements per second).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/bf16.h"
#include "core/fp16.h"
#include "core/fp4.h"
#include "core/fp8.h"
#include "core/kv_rows.h"
#include "core/quant.h"

namespace dsv4 {
namespace {

// bf16-representable values over a realistic spread of magnitudes.
std::vector<float> inputs(size_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> x(n);
  for (float& v : x) v = round_bf16(d(rng));
  return x;
}

constexpr size_t kN = 1 << 16;

template <class F>
void run_scalar(benchmark::State& state, F f) {
  const std::vector<float> x = inputs(kN);
  std::vector<uint16_t> out(kN);
  for (auto _ : state) {
    for (size_t i = 0; i < kN; ++i) out[i] = f(x[i]);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kN);
}

void BM_f32_to_bf16(benchmark::State& s) { run_scalar(s, [](float v) { return f32_to_bf16(v); }); }
void BM_f32_to_f16(benchmark::State& s) { run_scalar(s, [](float v) { return f32_to_f16(v); }); }
void BM_f32_to_e4m3(benchmark::State& s) { run_scalar(s, [](float v) { return f32_to_e4m3(v); }); }
void BM_f32_to_e2m1(benchmark::State& s) { run_scalar(s, [](float v) { return f32_to_e2m1(v); }); }
BENCHMARK(BM_f32_to_bf16);
BENCHMARK(BM_f32_to_f16);
BENCHMARK(BM_f32_to_e4m3);
BENCHMARK(BM_f32_to_e2m1);

void BM_qdq_fp8_ue8m0_32(benchmark::State& state) {
  const std::vector<float> x = inputs(kN);
  std::vector<float> out(kN);
  for (auto _ : state) {
    qdq_fp8_ue8m0(x, 32, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kN);
}
BENCHMARK(BM_qdq_fp8_ue8m0_32);

void BM_qdq_fp4_e4m3_16(benchmark::State& state) {
  const std::vector<float> x = inputs(kN);
  std::vector<float> out(kN);
  for (auto _ : state) {
    qdq_fp4_e4m3(x, 16, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kN);
}
BENCHMARK(BM_qdq_fp4_e4m3_16);

void BM_pack_unpack_kv_fp8_row(benchmark::State& state) {
  const std::vector<float> x = inputs(kKvDim);
  std::vector<uint8_t> row(kKvFp8RowBytes);
  std::vector<float> y(kKvDim);
  for (auto _ : state) {
    pack_kv_fp8_row(x, row);
    unpack_kv_fp8_row(row, y);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_pack_unpack_kv_fp8_row);

}  // namespace
}  // namespace dsv4

BENCHMARK_MAIN();
