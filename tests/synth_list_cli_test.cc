// `dsv4 synth --preset full --list`: one tab-separated line per tensor whose totals equal the releases.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <sstream>
#include <string>

namespace {

struct Totals {
  int64_t tensors = 0, bytes = 0, bad_lines = 0;
  std::map<std::string, int64_t> shards;
};

// Sums bytes from the printed dtype and shape only (independent of the table's own byte count).
Totals list_totals(const std::string& variant) {
  const std::string cmd = std::string(DSV4_BINARY_DIR) + "/dsv4 synth --preset full --variant " + variant +
                          " --list 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  Totals t;
  if (!p) return t;
  const std::map<std::string, int64_t> size = {{"F8_E4M3", 1}, {"F8_E8M0", 1}, {"I8", 1},
                                               {"BF16", 2},    {"F32", 4},     {"I64", 8}};
  char buf[1024];
  while (std::fgets(buf, sizeof buf, p)) {
    std::string line(buf), name, dtype, shape, shard;
    if (!line.empty() && line.back() == '\n') line.pop_back();
    std::istringstream in(line);
    if (!std::getline(in, name, '\t') || !std::getline(in, dtype, '\t') || !std::getline(in, shape, '\t') ||
        !std::getline(in, shard) || shape.size() < 2 || shape.front() != '[' || shape.back() != ']' ||
        !size.count(dtype)) {
      ++t.bad_lines;
      continue;
    }
    int64_t n = 1;
    std::istringstream dims(shape.substr(1, shape.size() - 2));
    std::string d;
    while (std::getline(dims, d, ',')) n *= std::stoll(d);
    ++t.tensors;
    t.bytes += n * size.at(dtype);
    t.shards[shard]++;
  }
  ::pclose(p);
  return t;
}

TEST(SynthListCli, V41FlashMatchesRelease) {
  const Totals t = list_totals("v41");
  // model-spec.md §5.1: 96,085 tensors, 510,286,023,000 bytes, 48 shards.
  EXPECT_EQ(t.bad_lines, 0);
  EXPECT_EQ(t.tensors, 96085);
  EXPECT_EQ(t.bytes, 510286023000);
  EXPECT_EQ(t.shards.size(), 48u);
  EXPECT_EQ(t.shards.count("model-00048-of-00048.safetensors"), 1u);
}

TEST(SynthListCli, V4Flash0731MatchesRelease) {
  const Totals t = list_totals("v4-0731");
  // model-spec.md §1 / §8: 72,317 tensors, 166,878,536,440 bytes, 48 shards.
  EXPECT_EQ(t.bad_lines, 0);
  EXPECT_EQ(t.tensors, 72317);
  EXPECT_EQ(t.bytes, 166878536440);
  EXPECT_EQ(t.shards.size(), 48u);
}

}  // namespace
