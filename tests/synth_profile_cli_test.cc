// `dsv4 synth --profile`: listed in the help, bad values and combinations refused with a message
// naming the flag, and `--profile gate` writes the files of family::write_gate_checkpoint byte for byte.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "family/deepseek_v41/gate_checkpoint.h"
#include "family/deepseek_v41/preset.h"

#include "cli_testing.h"

namespace {

namespace fs = std::filesystem;

using dsv4::cli_testing::CliRun;
using dsv4::cli_testing::run_dsv4;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(SynthProfileCli, HelpListsTheProfiles) {
  const CliRun r = run_dsv4("synth --help");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("--profile"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("{random,gate}"), std::string::npos) << r.out;
}

TEST(SynthProfileCli, RefusesBadValuesAndCombinations) {
  const std::string out = (fs::temp_directory_path() / ("dsv4_profile_refused_" + std::to_string(::getpid()))).string();
  const CliRun bad = run_dsv4("synth --preset tiny --profile chaotic --out " + out);
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.out.find("--profile: chaotic not in {random,gate}"), std::string::npos) << bad.out;
  const CliRun full = run_dsv4("synth --preset full --profile gate --out " + out);
  EXPECT_NE(full.status, 0);
  EXPECT_NE(full.out.find("--profile gate is for the tiny and small presets"), std::string::npos) << full.out;
  const CliRun seed = run_dsv4("synth --preset tiny --profile gate --seed 3 --out " + out);
  EXPECT_NE(seed.status, 0);
  EXPECT_NE(seed.out.find("--seed is for --profile random"), std::string::npos) << seed.out;
  const CliRun v4 = run_dsv4("synth --preset tiny --variant v4-0731 --profile gate --format exl3 --out " + out);
  EXPECT_NE(v4.status, 0);
  EXPECT_NE(v4.out.find("no pack layout is known for v4-0731"), std::string::npos) << v4.out;
  EXPECT_FALSE(fs::exists(fs::path(out) / "config.json"));
  fs::remove_all(out);
}

TEST(SynthProfileCli, GateWritesTheGateCheckpoint) {
  const fs::path root = fs::temp_directory_path() / ("dsv4_profile_gate_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const CliRun r = run_dsv4("synth --preset tiny --profile gate --no-sync --out " + (root / "cli").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("tiny v41 gate profile"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Engram hash multipliers are the release's"), std::string::npos) << r.out;
  dsv4::family::SynthOptions o;
  o.sync = false;
  const auto c = dsv4::family::preset_config(dsv4::family::Preset::tiny, dsv4::family::Variant::v41);
  ASSERT_TRUE(dsv4::family::write_gate_checkpoint(c, (root / "lib").string(), o).ok());
  int files = 0;
  for (const auto& e : fs::directory_iterator(root / "lib")) {
    EXPECT_EQ(slurp(e.path()), slurp(root / "cli" / e.path().filename())) << e.path().filename();
    ++files;
  }
  EXPECT_EQ(files, 18 + 4);  // shards, index, config.json, tokenizer.json, engram_token_map.json
  fs::remove_all(root);
}

}  // namespace
