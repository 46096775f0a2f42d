// `dsv4 inspect --plan` on a sparse full-size V4.1-Flash checkpoint, a made-up EXL3 pack and presets: verdicts,
// exit codes (0 fits, 3 does not) and the numbers, checked against model-spec.md arithmetic.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/safetensors_writer.h"
#include "family/deepseek_v41/exl3_sources.h"
#include "family/deepseek_v41/preset.h"
#include "formats/exl3/quant_config.h"

#include "cli_testing.h"

namespace {

namespace fs = std::filesystem;
using namespace dsv4;
using dsv4::cli_testing::CliRun;
using dsv4::cli_testing::run_dsv4;

int exit_code(const CliRun& r) { return WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1; }
bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The sparse full-size V4.1 release (all 510,286,023,000 payload bytes as file holes), written once.
class MemoryPlanCli : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("dsv4_plan_cli_" + std::to_string(::getpid())));
    fs::remove_all(*dir_);
    const CliRun r = run_dsv4("synth --preset full --sparse all --no-sync --out " + dir_->string());
    ASSERT_EQ(exit_code(r), 0) << r.out;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static CliRun plan(const std::string& args) { return run_dsv4("inspect " + dir_->string() + " --plan " + args); }
  static fs::path* dir_;
};
fs::path* MemoryPlanCli::dir_ = nullptr;

// Per-GPU weights of the release, by hand in src/engine/weight_share_test.cc from model-spec.md §5 and §7:
// 4,662,950,472 B on every rank + 303,335,934,720 B split over tp (FP4 experts, embed/head rows, query heads,
// wo_a groups): tp 1 307,998,885,192 B = 286.85 GiB; tp 2 145.59; tp 4 74.97; tp 8 42,579,942,312 B = 39.66 GiB.
// The Engram tables (202,758,032,400 B = 188.83 GiB, §7.3) stay on the host.
constexpr const char* kWeightsGiB[] = {"286.85", "145.59", "74.97", "39.66"};

// One 80 GiB GPU cannot hold 286.85 GiB of weights: exit 3, the numbers, and --tp 8 as a fix that fits
// (39.66 GiB of weights + about 14 GiB of scratch, caches and runtime).
TEST_F(MemoryPlanCli, OneGpuIsRefusedWithTheNumbers) {
  const CliRun r = plan("--tp 1 --gpu-memory 80G --host-memory 1T");
  EXPECT_EQ(exit_code(r), 3) << r.out;
  EXPECT_TRUE(has(r.out, "resource_exhausted: the model does not fit")) << r.out;
  EXPECT_TRUE(has(r.out, "GPU 0 needs ")) << r.out;
  EXPECT_TRUE(has(r.out, "weights 286.85 GiB")) << r.out;
  EXPECT_TRUE(has(r.out, "has 80.00 GiB (short ")) << r.out;
  EXPECT_TRUE(has(r.out, "--tp 2 would need ")) << r.out;
  EXPECT_TRUE(has(r.out, "--tp 4 would need ")) << r.out;
  EXPECT_TRUE(has(r.out, "per GPU (fits)")) << r.out;  // --tp 8
  EXPECT_TRUE(has(r.out, "EXL3 pack")) << r.out;
  EXPECT_TRUE(has(r.out, "--context ")) << r.out;
  EXPECT_TRUE(has(r.out, "--parallel ")) << r.out;
  EXPECT_FALSE(has(r.out, "host needs")) << r.out;
}

// Eight 141 GiB GPUs hold 39.66 GiB of weights each with room to spare; the host pins the 188.83 GiB of tables.
TEST_F(MemoryPlanCli, EightH200sFit) {
  const CliRun r = plan("--tp 8 --gpu-memory 141G --host-memory 1T --engram pinned");
  EXPECT_EQ(exit_code(r), 0) << r.out;
  EXPECT_TRUE(has(r.out, "verdict: fits")) << r.out;
  EXPECT_TRUE(has(r.out, "Engram pinned 188.83")) << r.out;
}

// Every rank of every tp has its line, with the hand-computed weights (400 GiB GPUs: every tp fits).
TEST_F(MemoryPlanCli, EveryRankIsPrinted) {
  const int tps[] = {1, 2, 4, 8};
  for (int i = 0; i < 4; ++i) {
    const CliRun r = plan("--tp " + std::to_string(tps[i]) + " --gpu-memory 400G --host-memory 1T");
    EXPECT_EQ(exit_code(r), 0) << r.out;
    for (int rank = 0; rank < 8; ++rank) {
      const std::string line = "GPU " + std::to_string(rank) + " ";
      EXPECT_EQ(has(r.out, line), rank < tps[i]) << tps[i] << " " << line << r.out;
    }
    EXPECT_TRUE(has(r.out, std::string(" ") + kWeightsGiB[i] + " ")) << r.out;
  }
}

// Without --tp: all four plans; 80 GiB GPUs fit at tp 8 only (tp 4 needs 74.97 GiB of weights plus scratch).
TEST_F(MemoryPlanCli, EveryTpWhenOmitted) {
  const CliRun r = plan("--gpu-memory 80G --host-memory 1T");
  EXPECT_EQ(exit_code(r), 0) << r.out;
  for (const char* tp : {"--tp 1,", "--tp 2,", "--tp 4,", "--tp 8,"}) EXPECT_TRUE(has(r.out, tp)) << tp << r.out;
  EXPECT_TRUE(has(r.out, "fits at --tp 8\n")) << r.out;
}

// A host that cannot pin the tables: refused naming host memory, with --engram mapped as the fix.
TEST_F(MemoryPlanCli, SmallHostIsRefused) {
  const CliRun r = plan("--tp 8 --gpu-memory 141G --host-memory 64G --engram pinned");
  EXPECT_EQ(exit_code(r), 3) << r.out;
  EXPECT_TRUE(has(r.out, "host needs ")) << r.out;
  EXPECT_TRUE(has(r.out, "Engram tables pinned 188.83 GiB")) << r.out;
  EXPECT_TRUE(has(r.out, "has 64.00 GiB")) << r.out;
  EXPECT_TRUE(has(r.out, "--engram mapped would need")) << r.out;
  EXPECT_FALSE(has(r.out, "GPU 0 needs")) << r.out;
  const CliRun m = plan("--tp 8 --gpu-memory 141G --host-memory 64G --engram mapped");
  EXPECT_EQ(exit_code(m), 0) << m.out;
}

// The preset gives the same plan as the written checkpoint.
TEST_F(MemoryPlanCli, PresetMatchesTheCheckpoint) {
  const std::string args = " --plan --tp 4 --gpu-memory 141G --host-memory 1T";
  const CliRun a = run_dsv4("inspect --preset full" + args);
  const CliRun b = plan("--tp 4 --gpu-memory 141G --host-memory 1T");
  EXPECT_EQ(exit_code(a), 0) << a.out;
  EXPECT_EQ(a.out, b.out);
}

// Usage errors exit 2 (CLI11's own parse errors exit with its codes, never 0 or 3).
TEST_F(MemoryPlanCli, RefusesBadFlags) {
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"--tp 1 --gpu-memory 80X --host-memory 1T", "'80X' is not a size"},
      {"--tp 3 --gpu-memory 80G --host-memory 1T", "--tp 3: "},
      {"--tp 1 --gpu-memory 80G --host-memory 1T --engram ssd", "--engram"},
  };
  for (const Case& c : cases) {
    const CliRun r = plan(c.args);
    EXPECT_NE(exit_code(r), 0) << c.args << r.out;
    EXPECT_NE(exit_code(r), 3) << c.args << r.out;
    EXPECT_TRUE(has(r.out, c.message)) << c.args << r.out;
  }
  EXPECT_EQ(exit_code(plan("--tp 1 --gpu-memory 80X --host-memory 1T")), 2);
  const CliRun r = run_dsv4("inspect --preset tiny --tp 2");
  EXPECT_EQ(exit_code(r), 2) << r.out;
  EXPECT_TRUE(has(r.out, "--tp goes with --plan")) << r.out;
}

// An EXL3 pack directory: config.json with an EXL3 quantization_config and the pack's own tensors (made up here,
// as file holes); its Engram tables come from the release shards and count on the host.
//   expert 100's w1 at 2 bits: trellis I16 [5120/16, 2304/16, 32] 2,949,120 B + suh F16 [5120] 10,240 +
//   svh F16 [2304] 4,608 = 2,963,968 B, on rank 0 of 2 (experts 0-191);
//   head at 2 bits: trellis [320, 8080, 32] 165,478,400 B + svh [129280] 258,560, cut in halves (64,640 rows =
//   505 blocks of 128) + suh [5120] 10,240 whole = 82,878,720 B per rank;
//   embed BF16 [129280, 5120] 1,323,827,200 B split by rows: 661,913,600 per rank; a norm 10,240 on both.
//   Rank 0: 747,766,528 B = 0.70 GiB; rank 1: 744,802,560 B = 0.69 GiB.
TEST_F(MemoryPlanCli, Exl3PackDirectory) {
  const fs::path pack = fs::temp_directory_path() / ("dsv4_plan_pack_" + std::to_string(::getpid()));
  fs::remove_all(pack);
  fs::create_directories(pack);
  exl3::QuantConfig q;
  q.version = "0.0.0";
  q.bits = 2;
  q.head_bits = 2;
  q.out_scales = "never";
  std::ofstream(pack / "config.json") << family::exl3_pack_config_json(family::v41_flash_config(), q);
  SafetensorsWriter w;
  ASSERT_TRUE(w.add_hole("layers.5.ffn.experts.100.w1.trellis", DType::i16, {320, 144, 32}).ok());
  ASSERT_TRUE(w.add_hole("layers.5.ffn.experts.100.w1.suh", DType::f16, {5120}).ok());
  ASSERT_TRUE(w.add_hole("layers.5.ffn.experts.100.w1.svh", DType::f16, {2304}).ok());
  ASSERT_TRUE(w.add_hole("head.trellis", DType::i16, {320, 8080, 32}).ok());
  ASSERT_TRUE(w.add_hole("head.suh", DType::f16, {5120}).ok());
  ASSERT_TRUE(w.add_hole("head.svh", DType::f16, {129280}).ok());
  ASSERT_TRUE(w.add_hole("embed.weight", DType::bf16, {129280, 5120}).ok());
  ASSERT_TRUE(w.add_hole("layers.5.attn_norm.weight", DType::bf16, {5120}).ok());
  SafetensorsWriteOptions o;
  o.sync = false;
  ASSERT_TRUE(w.write((pack / "model.safetensors").string(), o).ok());
  const CliRun r = run_dsv4("inspect " + pack.string() + " --plan --tp 2 --gpu-memory 80G --host-memory 1T --engram pinned");
  EXPECT_EQ(exit_code(r), 0) << r.out;
  EXPECT_TRUE(has(r.out, "EXL3 pack")) << r.out;
  EXPECT_TRUE(has(r.out, "Engram pinned 188.83")) << r.out;
  auto weights_of = [&](int rank) {
    const size_t at = r.out.find("GPU " + std::to_string(rank) + " ");
    return at == std::string::npos ? std::string() : r.out.substr(at + 6, 16);
  };
  EXPECT_TRUE(has(weights_of(0), " 0.70 ")) << r.out;
  EXPECT_TRUE(has(weights_of(1), " 0.69 ")) << r.out;
  fs::remove_all(pack);
}

}  // namespace
