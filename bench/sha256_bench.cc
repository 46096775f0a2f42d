// SHA-256 throughput: in memory, and whole files through sha256_file_hex and coreutils sha256sum,
// with the file in the page cache (warm) or evicted from it before every pass (cold).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/sha256.h"

namespace dsv4 {
namespace {

// $DSV4_SHA256_BENCH_FILE if set (e.g. a 2 GiB file), else a 512 MiB file generated once in TMPDIR
// and removed at exit.
struct BenchFile {
  std::string path;
  bool generated = false;
  BenchFile() {
    if (const char* p = std::getenv("DSV4_SHA256_BENCH_FILE")) {
      path = p;
      return;
    }
    path = (std::filesystem::temp_directory_path() / fmt::format("dsv4-sha256-bench-{}.bin", ::getpid())).string();
    generated = true;
    std::vector<uint8_t> block(size_t{16} << 20);
    for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<uint8_t>(i * 7919u + (i >> 9));
    std::FILE* f = std::fopen(path.c_str(), "wb");
    for (int i = 0; f && i < 32; ++i) {
      block[0] = static_cast<uint8_t>(i);  // no two 16 MiB pieces alike
      std::fwrite(block.data(), 1, block.size(), f);
    }
    if (f) {
      std::fflush(f);
      ::fsync(fileno(f));  // clean pages: only those can be evicted for the cold runs
      std::fclose(f);
    }
  }
  ~BenchFile() {
    if (generated) std::remove(path.c_str());
  }
};

const std::string& bench_file() {
  static const BenchFile file;
  return file.path;
}

// Drops this file's pages from the page cache (no privileges needed, other files untouched).
void evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void BM_Sha256Memory(benchmark::State& state) {
  std::vector<uint8_t> buf(size_t(state.range(0)) << 20);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 31u);
  for (auto _ : state) benchmark::DoNotOptimize(sha256_hex(buf));
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(buf.size()));
}
BENCHMARK(BM_Sha256Memory)->Arg(64)->Unit(benchmark::kMillisecond);

// Arg 0: warm (page cache), 1: cold (evicted before each pass).
void BM_Sha256File(benchmark::State& state) {
  const std::string& path = bench_file();
  const int64_t bytes = static_cast<int64_t>(std::filesystem::file_size(path));
  for (auto _ : state) {
    if (state.range(0)) {
      state.PauseTiming();
      evict(path);
      state.ResumeTiming();
    }
    auto d = sha256_file_hex(path);
    if (!d.ok()) state.SkipWithError(d.status().to_string().c_str());
    benchmark::DoNotOptimize(d);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * bytes);
}
BENCHMARK(BM_Sha256File)->ArgName("cold")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same file through coreutils sha256sum (one process per pass; its start-up is in the time).
void BM_Sha256sumFile(benchmark::State& state) {
  const std::string& path = bench_file();
  const int64_t bytes = static_cast<int64_t>(std::filesystem::file_size(path));
  for (auto _ : state) {
    if (state.range(0)) {
      state.PauseTiming();
      evict(path);
      state.ResumeTiming();
    }
    std::FILE* p = popen(("sha256sum '" + path + "'").c_str(), "r");
    char out[65] = {};
    if (!p || std::fread(out, 1, 64, p) != 64) state.SkipWithError("sha256sum failed");
    if (p) pclose(p);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * bytes);
}
BENCHMARK(BM_Sha256sumFile)->ArgName("cold")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace dsv4

BENCHMARK_MAIN();
