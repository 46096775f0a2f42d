// The full-size DeepSeek-V4.1-Flash checkpoint (510,286,023,000 bytes in 48 shards, written sparse: real headers
// and sizes, holes for data) runs on the CPU oracle of a CI-class machine: `dsv4 run` produces 2 tokens while its
// anonymous memory (RssAnon, sampled every 20 ms) stays under 8 GiB — the weights are read in place from the
// mapped shards, a row at a time, never decoded whole. The wall time and peaks are printed for docs/perf.md.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "cli_testing.h"

namespace {

namespace fs = std::filesystem;

// A /proc/PID/status field in kB, or -1.
int64_t status_kb(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  return -1;
}

TEST(FullSizeCpu, V41FlashRunsTwoTokensUnder8GiBAnonymous) {
  const fs::path dir = fs::temp_directory_path() / ("dsv4_full_v41_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto w = dsv4::cli_testing::run_dsv4("synth --preset full --sparse all --no-sync --out " + dir.string());
  ASSERT_EQ(w.status, 0) << w.out;
  const fs::path out = dir / "run.txt";
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::freopen(out.c_str(), "w", stdout);
    std::freopen(out.c_str(), "a", stderr);
    const std::string bin = std::string(DSV4_BINARY_DIR) + "/dsv4";
    const std::string model = dir.string();
    ::execl(bin.c_str(), bin.c_str(), "run", "--model", model.c_str(), "--ids", "0", "--max-tokens", "2", "--threads",
            "2", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int64_t anon = 0, file = 0;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    anon = std::max(anon, status_kb(pid, "RssAnon"));
    file = std::max(file, status_kb(pid, "RssFile"));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::stringstream text;
  text << std::ifstream(out).rdbuf();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text.str();
  EXPECT_NE(text.str().find("ids: "), std::string::npos) << text.str();
  // Two generated ids after "ids: ".
  const std::string ids = text.str().substr(text.str().find("ids: ") + 5);
  EXPECT_EQ(std::count(ids.begin(), ids.begin() + ids.find('\n'), ','), 1) << ids;
  EXPECT_GT(anon, 0) << "RssAnon was never sampled";
  EXPECT_LT(anon, int64_t{8} << 20) << "peak RssAnon " << anon << " kB";
  std::printf("full-size V4.1-Flash (sparse), dsv4 run --ids 0 --max-tokens 2 --threads 2: %.1f s, peak RssAnon "
              "%.1f MiB, peak RssFile %.1f MiB\n", secs, anon / 1024.0, file / 1024.0);
  fs::remove_all(dir);
}

}  // namespace
