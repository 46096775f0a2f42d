// Safetensors throughput: header parse+validate of a layer-sized shard, and streaming writes.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/safetensors.h"
#include "core/safetensors_writer.h"

namespace dsv4 {
namespace {

// A header shaped like one V4.1 backbone layer shard (model-spec.md §5.3): 2,334 tensors, of
// which 384 x 6 expert tensors, with small stand-in shapes (the header size is what matters).
std::vector<uint8_t> layer_like_file() {
  SafetensorsWriter w;
  auto add = [&](const std::string& name, DType t, std::vector<int64_t> shape) {
    (void)w.add_generated(name, t, std::move(shape), [](int64_t, std::span<uint8_t> out) {
      std::fill(out.begin(), out.end(), uint8_t{0});
      return ok_status();
    });
  };
  for (int i = 0; i < 30; ++i) add("layers.7.misc." + std::to_string(i) + ".weight", DType::bf16, {4, 4});
  for (int e = 0; e < 384; ++e) {
    for (const char* w_ : {"w1", "w2", "w3"}) {
      std::string p = "layers.7.ffn.experts." + std::to_string(e) + "." + w_;
      add(p + ".weight", DType::i8, {2, 16});
      add(p + ".scale", DType::f8_e8m0, {2, 1});
    }
  }
  SafetensorsWriteOptions o;
  o.sync = false;
  return std::move(w.serialize(o)).value();
}

void BM_ParseLayerShardHeader(benchmark::State& state) {
  const auto file = layer_like_file();
  for (auto _ : state) {
    auto h = parse_safetensors("bench", file);
    benchmark::DoNotOptimize(h);
    if (!h.ok()) state.SkipWithError("parse failed");
  }
  state.counters["tensors"] = 2334;
  state.counters["header_bytes"] = static_cast<double>(file.size());
}
BENCHMARK(BM_ParseLayerShardHeader)->Unit(benchmark::kMillisecond);

// Streams one generated tensor of range(0) MiB to a file in TMPDIR (no fsync: measures the
// writer and the page cache, not the disk).
void BM_StreamingWrite(benchmark::State& state) {
  const int64_t bytes = state.range(0) << 20;
  const std::string path = (std::filesystem::temp_directory_path() / "dsv4-bench.safetensors").string();
  SafetensorsWriter w;
  (void)w.add_generated("t", DType::f8_e4m3, {bytes / 256, 256}, [](int64_t off, std::span<uint8_t> out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(off + static_cast<int64_t>(i));
    return ok_status();
  });
  SafetensorsWriteOptions o;
  o.sync = false;
  for (auto _ : state) {
    if (!w.write(path, o).ok()) state.SkipWithError("write failed");
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  std::filesystem::remove(path);
}
BENCHMARK(BM_StreamingWrite)->Arg(256)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dsv4

BENCHMARK_MAIN();
