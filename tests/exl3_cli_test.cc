// `dsv4 synth --format exl3` then `dsv4 run` on the pack: it generates with --engram-shards and is
// refused, naming the flag, without it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "cli_testing.h"

namespace {

using dsv4::cli_testing::CliRun;
using dsv4::cli_testing::run_dsv4;

TEST(Exl3Cli, SynthPackThenRunWithTheReleaseShards) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("dsv4_exl3_cli_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const CliRun synth = run_dsv4("synth --preset tiny --format exl3 --no-sync --out " + dir.string());
  ASSERT_EQ(synth.status, 0) << synth.out;
  EXPECT_NE(synth.out.find("EXL3 pack"), std::string::npos) << synth.out;
  EXPECT_TRUE(fs::exists(dir / "release-engram"));
  const CliRun ok = run_dsv4("run --threads 2 --model " + dir.string() + " --engram-shards " +
                            (dir / "release-engram").string() + " --ids 0,19923,14,1026 --max-tokens 3");
  ASSERT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("ids: "), std::string::npos) << ok.out;
  const CliRun refused = run_dsv4("run --model " + dir.string() + " --ids 0,19923 --max-tokens 1");
  EXPECT_NE(refused.status, 0);
  EXPECT_NE(refused.out.find("--engram-shards"), std::string::npos) << refused.out;
  fs::remove_all(dir);
}

}  // namespace
