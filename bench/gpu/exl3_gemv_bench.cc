// EXL3 GEMV/GEMM speed on the V4.1 expert and attention shapes against the memory floor of the
// layer's own bytes (trellis + suh + svh) at the device-to-device copy bandwidth measured in the run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/exl3_device.h"
#include "formats/exl3/half.h"

namespace {

using namespace dsv4;
using namespace dsv4::cuda;

#define CHECK_CUDA(expr)                                                                  \
  do {                                                                                    \
    cudaError_t e_ = (expr);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

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
  layer.trellis.resize(s.in / 16 * (s.out / 16) * 16 * s.bits);
  for (auto& w : layer.trellis) w = static_cast<uint16_t>(rng());
  for (int64_t i = 0; i < s.in; ++i) layer.suh.push_back(exl3::double_to_half_bits((rng() & 1 ? -0.01 : 0.01)));
  for (int64_t i = 0; i < s.out; ++i) layer.svh.push_back(exl3::double_to_half_bits((rng() & 1 ? -0.5 : 0.5)));
  return layer;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";  // optional: measure shapes whose name contains this
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: nothing to measure\n");
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
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
      cudaStream_t stream;
      CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      // One graph holding one launch per copy: replay time / copies = time per layer.
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      for (const auto& layer : layers)
        CHECK_CUDA(exl3_gemm(layer.weights, x.as<float>(), rows, y.as<float>(), ws.get(), stream));
      CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
      CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      cudaEvent_t t0, t1;
      cudaEventCreate(&t0);
      cudaEventCreate(&t1);
      for (int i = 0; i < 3; ++i) CHECK_CUDA(cudaGraphLaunch(exec, stream));
      std::vector<float> ms;
      for (int i = 0; i < 15; ++i) {
        cudaEventRecord(t0, stream);
        CHECK_CUDA(cudaGraphLaunch(exec, stream));
        cudaEventRecord(t1, stream);
        CHECK_CUDA(cudaEventSynchronize(t1));
        float m;
        cudaEventElapsedTime(&m, t0, t1);
        ms.push_back(m);
      }
      std::sort(ms.begin(), ms.end());
      const double us = ms[ms.size() / 2] * 1e3 / copies;
      const double floor_us = layer_bytes / bandwidth * 1e6;
      std::printf("%-20s %5lld %10zu %10.2f %10.2f %8.2f %8.0f\n", s.name, (long long)rows, layer_bytes, us,
                  floor_us, us / floor_us, layer_bytes / (us * 1e-6) / 1e9);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(stream);
    }
  }
  return 0;
}
