// EXL3 GEMV/GEMM speed on the V4.1 expert and attention shapes, and the grouped routed experts of
// one MoE layer, against the memory floor of the weights' own bytes (trellis + suh + svh) at the
// device-to-device copy bandwidth measured in the same run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/exl3/exl3_device.h"
#include "bench_device.h"
#include "formats/exl3/half.h"
#include "graph_timing.h"

namespace {

using namespace dsv4;
using namespace dsv4::cuda;

struct Shape {
  const char* name;
  int64_t in, out;
  int bits;
  int codebook;
};

// Bytes/s of a large device-to-device copy, counting bytes read plus bytes written.
double copy_bandwidth() {
  const size_t bytes = size_t(2) << 30;
  DeviceBuffer a(bytes), b(bytes);
  CHECK_CUDA(cudaMemset(a.get(), 1, bytes));
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  for (int i = 0; i < 3; ++i) CHECK_CUDA(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice));
  std::vector<float> ms;
  for (int i = 0; i < 10; ++i) {
    cudaEventRecord(t0);
    CHECK_CUDA(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice));
    cudaEventRecord(t1);
    cudaEventSynchronize(t1);
    float m;
    cudaEventElapsedTime(&m, t0, t1);
    ms.push_back(m);
  }
  std::sort(ms.begin(), ms.end());
  return 2.0 * bytes / (ms[ms.size() / 2] * 1e-3);
}

exl3::Linear random_layer(const Shape& s, uint64_t seed) {
  exl3::Linear layer;
  layer.name = s.name;
  layer.in_features = s.in;
  layer.out_features = s.out;
  layer.bits = s.bits;
  layer.codebook = static_cast<exl3::Codebook>(s.codebook);
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> trellis(s.in / 16 * (s.out / 16) * 16 * s.bits);
  for (auto& w : trellis) w = static_cast<uint16_t>(rng());
  layer.trellis = std::move(trellis);
  for (int64_t i = 0; i < s.in; ++i) layer.suh.push_back(exl3::double_to_half_bits((rng() & 1 ? -0.01 : 0.01)));
  for (int64_t i = 0; i < s.out; ++i) layer.svh.push_back(exl3::double_to_half_bits((rng() & 1 ? -0.5 : 0.5)));
  return layer;
}

// Routed experts of one MoE layer (6 of them per row, V4.1-Flash: D 5120, I 2304; gate/up 2-bit,
// down 3-bit, mul1): calls rotate over 8 disjoint sets of 6 experts (48 expert copies, about 0.5 GB)
// so no call finds its experts in L2. Rows either share their 6 experts or each take 6 of their own.
void moe_bench(double bandwidth) {
  const int64_t D = 5120, I = 2304;
  constexpr int kSets = 8, kTopK = 6, kExperts = kSets * kTopK;
  const exl3::Linear p1 = random_layer({"w1", D, I, 2, 2}, 7), p3 = random_layer({"w3", D, I, 2, 2}, 8),
                     p2 = random_layer({"w2", I, D, 3, 2}, 9);
  auto bytes_of = [](const exl3::Linear& l) { return 2 * (l.trellis.size() + l.suh.size() + l.svh.size()); };
  const size_t expert_bytes = bytes_of(p1) + bytes_of(p3) + bytes_of(p2);
  std::vector<Exl3DeviceLinear> keep;
  std::vector<Exl3Weights> h1, h3, h2;
  for (int e = 0; e < kExperts; ++e) {
    for (const exl3::Linear* p : {&p1, &p3, &p2}) {
      auto up = upload(*p);
      if (!up.ok()) {
        std::fprintf(stderr, "%s\n", up.status().to_string().c_str());
        std::exit(1);
      }
      keep.push_back(std::move(*up));
    }
    h1.push_back(keep[keep.size() - 3].weights);
    h3.push_back(keep[keep.size() - 2].weights);
    h2.push_back(keep[keep.size() - 1].weights);
  }
  DeviceBuffer d1(sizeof(Exl3Weights) * kExperts), d3(sizeof(Exl3Weights) * kExperts), d2(sizeof(Exl3Weights) * kExperts);
  CHECK_CUDA(cudaMemcpy(d1.get(), h1.data(), d1.bytes(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d3.get(), h3.data(), d3.bytes(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d2.get(), h2.data(), d2.bytes(), cudaMemcpyHostToDevice));
  Exl3ExpertsView group;
  group.w1 = d1.as<Exl3Weights>();
  group.w3 = d3.as<Exl3Weights>();
  group.w2 = d2.as<Exl3Weights>();
  group.n_experts = kExperts;
  group.dim = group.dim_p = D;
  group.inter = group.inter_p = I;
  group.kinds[0] = group.kinds[1] = exl3_kind_bit(2, 2);
  group.kinds[2] = exl3_kind_bit(3, 2);
  group.gate_up_same_kind = true;
  struct Case {
    const char* name;
    int rows;
    bool distinct;  // each row its own 6 experts
  };
  for (const Case c : {Case{"moe 1 row", 1, false}, Case{"moe 8 rows shared", 8, false},
                       Case{"moe 8 rows distinct", 8, true}}) {
    const int64_t pairs = int64_t(c.rows) * kTopK;
    const int distinct_experts = c.distinct ? c.rows * kTopK : kTopK;
    if (distinct_experts > kExperts) continue;
    std::vector<DeviceBuffer> route_row, route_expert;
    for (int set = 0; set < kSets; ++set) {
      std::vector<std::pair<int32_t, int32_t>> t;  // (expert, row), sorted
      for (int r = 0; r < c.rows; ++r)
        for (int j = 0; j < kTopK; ++j)
          t.emplace_back(c.distinct ? (set * kTopK + r * kTopK + j) % kExperts : set * kTopK + j, r);
      std::sort(t.begin(), t.end());
      std::vector<int32_t> pe, pr;
      for (auto& [e, r] : t) pe.push_back(e), pr.push_back(r);
      route_row.emplace_back(sizeof(int32_t) * pairs);
      route_expert.emplace_back(sizeof(int32_t) * pairs);
      CHECK_CUDA(cudaMemcpy(route_row.back().get(), pr.data(), sizeof(int32_t) * pairs, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemcpy(route_expert.back().get(), pe.data(), sizeof(int32_t) * pairs, cudaMemcpyHostToDevice));
    }
    std::vector<float> weights(pairs, 0.25f);
    DeviceBuffer w(sizeof(float) * pairs), x(sizeof(float) * c.rows * D), out(sizeof(float) * pairs * D);
    DeviceBuffer scratch(exl3_routed_experts_scratch_bytes(pairs, group));
    CHECK_CUDA(cudaMemcpy(w.get(), weights.data(), w.bytes(), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemset(x.get(), 0x3C, x.bytes()));
    const double us = bench::graph_median_us(
        [&](int i, cudaStream_t st) {
          CHECK_CUDA(exl3_routed_experts(x.as<float>(), route_row[i % kSets].as<int32_t>(),
                                         route_expert[i % kSets].as<int32_t>(), w.as<float>(), pairs, group, 10.f,
                                         scratch.get(), out.as<float>(), st));
        },
        4 * kSets, 15);
    const double bytes = double(expert_bytes) * distinct_experts;
    const double floor_us = bytes / bandwidth * 1e6;
    std::printf("%-20s %5d %10.0f %10.2f %10.2f %8.2f %8.0f\n", c.name, c.rows, bytes, us, floor_us, us / floor_us,
                bytes / (us * 1e-6) / 1e9);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";  // optional: measure shapes whose name contains this
  const cudaDeviceProp prop = dsv4::bench::bench_device();
  const double bandwidth = copy_bandwidth();
  std::printf("device: %s, %d SMs, L2 %d MB; measured copy bandwidth %.0f GB/s\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, bandwidth / 1e9);

  // [in, out] in EXL3 orientation; V4.1-Flash shapes (model-spec §5), Mia-layout widths (formats.md §1.9):
  // routed experts 2/3-bit, attention mul1 K = 5.
  const std::vector<Shape> shapes = {
      {"expert.w1/w3 k2", 5120, 2304, 2, 2}, {"expert.w1/w3 k3", 5120, 2304, 3, 2},
      {"expert.w2 k2", 2304, 5120, 2, 2},    {"expert.w2 k3", 2304, 5120, 3, 2},
      {"attn.wq_a k5", 5120, 1280, 5, 2},    {"attn.wq_b k5", 1280, 32768, 5, 2},
      {"attn.wkv k5", 5120, 512, 5, 2},      {"attn.wo_a.slice k5", 4096, 1024, 5, 2},
      {"attn.wo_b k5", 8192, 5120, 5, 2},    {"attn.wq_b k5 3inst", 1280, 32768, 5, 0},
      {"attn.wq_b k5 mcg", 1280, 32768, 5, 1},
  };
  std::printf("%-20s %5s %10s %10s %10s %8s %8s\n", "shape", "rows", "bytes", "us", "floor_us", "ratio", "GB/s");
  for (const Shape& s : shapes) {
    if (!only.empty() && std::string(s.name).find(only) == std::string::npos) continue;
    const exl3::Linear proto = random_layer(s, 42);
    const size_t layer_bytes = proto.trellis.size() * 2 + proto.suh.size() * 2 + proto.svh.size() * 2;
    // Enough copies that one pass over them is several times the L2: every launch reads from DRAM.
    const int copies = static_cast<int>(std::max<size_t>(2, (size_t(prop.l2CacheSize) * 4) / layer_bytes + 1));
    std::vector<Exl3DeviceLinear> layers;
    for (int c = 0; c < copies; ++c) {
      auto up = upload(proto);
      if (!up.ok()) {
        std::fprintf(stderr, "%s\n", up.status().to_string().c_str());
        return 1;
      }
      layers.push_back(std::move(*up));
    }
    for (int64_t rows : {1, 8, 32}) {
      DeviceBuffer x(sizeof(float) * rows * s.in), y(sizeof(float) * rows * s.out);
      DeviceBuffer ws(exl3_workspace_bytes(layers[0].weights, rows));
      CHECK_CUDA(cudaMemset(x.get(), 0x3C, x.bytes()));
      CHECK_CUDA(exl3_workspace_init(layers[0].weights, ws.get(), nullptr));
      // One graph holding one launch per copy: replay time / copies = time per layer.
      const double us = bench::graph_median_us(
          [&](int i, cudaStream_t st) {
            CHECK_CUDA(exl3_gemm(layers[i % copies].weights, x.as<float>(), rows, y.as<float>(), ws.get(), st));
          },
          copies, 15);
      const double floor_us = layer_bytes / bandwidth * 1e6;
      std::printf("%-20s %5lld %10zu %10.2f %10.2f %8.2f %8.0f\n", s.name, (long long)rows, layer_bytes, us,
                  floor_us, us / floor_us, layer_bytes / (us * 1e-6) / 1e9);
    }
  }
  if (only.empty() || only == "moe") moe_bench(bandwidth);
  return 0;
}
