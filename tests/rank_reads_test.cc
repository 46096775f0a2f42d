// A tensor-parallel rank reads only its share: on a full-width V4.1 checkpoint (sparse: real headers and sizes,
// holes for data; the first 4 backbone layers, the head and the 3 DSpark stages), each rank of TP 4 opens the
// model, cuts its views by the split plan before reading a byte, and reads (pread, counted per file by the staged
// reader) at most its share of the release table by fabric::rank_device_bytes — computed from the table and the
// plan alone — plus the one documented departure (the Markov head kept whole on every rank).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>

#include "core/staged_reader.h"
#include "engine/weight_reads.h"
#include "fabric/rank_weights.h"
#include "fabric/split_plan.h"
#include "family/deepseek_v41/model.h"
#include "family/deepseek_v41/preset.h"
#include "family/deepseek_v41/synth.h"
#include "family/deepseek_v41/with_layers.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

// Counts what it is handed; never keeps a buffer.
class CountingSink final : public StageSink {
 public:
  Status wait(int) override { return ok_status(); }
  Status consume(int, const ReadJob&, int64_t, int64_t n) override {
    bytes += n;
    return ok_status();
  }
  Status finish() override { return ok_status(); }
  std::atomic<int64_t> bytes{0};
};

TEST(RankReads, EachTp4RankReadsItsShareOnly) {
  auto cut = family::with_layers(family::preset_config(family::Preset::full, family::Variant::v41), 4);
  ASSERT_TRUE(cut.ok()) << cut.status().to_string();
  const family::Config c = *cut;
  const fs::path dir = fs::temp_directory_path() / ("dsv4_rank_reads_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  family::SynthOptions so;
  so.sync = false;
  so.sparse = family::SynthSparse::all;
  ASSERT_TRUE(family::write_synthetic_checkpoint(c, dir.string(), so).ok());
  auto whole = family::open_model(dir.string());
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  const family::TensorTable table = family::expected_tensors(c);
  constexpr int32_t kTp = 4;
  auto plan = fabric::make_split_plan(c, table, kTp, fabric::ExpertSplit::expert_parallel);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  // The Markov head's embedding and head: split by vocabulary in the plan, kept whole on every rank.
  int64_t markov = 0;
  for (const family::TensorSpec& t : table.tensors)
    if (t.name.find("markov_head.") != std::string::npos) markov += t.bytes();
  const int64_t departure = markov - markov / kTp;
  int64_t non_engram = 0;
  for (const family::TensorSpec& t : table.tensors)
    if (t.role != family::TensorRole::engram_table && t.role != family::TensorRole::engram_scale) non_engram += t.bytes();
  std::vector<uint8_t> a(8 << 20), b(8 << 20);
  const std::vector<StageBuffer> buffers{{a.data(), static_cast<int64_t>(a.size())}, {b.data(), static_cast<int64_t>(b.size())}};
  int64_t all_ranks = 0;
  for (int32_t r = 0; r < kTp; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    auto m = fabric::rank_model(**whole, *plan, r);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    CountingSink sink;
    auto stats = stage_reads(engine::weight_reads(**m), buffers, sink);
    ASSERT_TRUE(stats.ok()) << stats.status().to_string();
    const int64_t share = fabric::rank_device_bytes(*plan, table, r);
    EXPECT_EQ(stats->memory_bytes, 0) << "every byte comes from the shard files";
    EXPECT_EQ(sink.bytes.load(), stats->file_bytes);
    EXPECT_LE(stats->file_bytes, share + departure) << "share " << share;
    // Not the whole model: about a quarter of the routed experts and heads plus the replicated rest.
    EXPECT_LT(stats->file_bytes, non_engram / 2) << "of " << non_engram;
    EXPECT_GT(stats->file_bytes, share / 2);
    std::printf("rank %d of %d: read %.3f GiB from %zu files; share %.3f GiB (+%.3f GiB Markov head); whole %.3f GiB\n",
                r, kTp, stats->file_bytes / 1073741824.0, stats->by_file.size(), share / 1073741824.0,
                departure / 1073741824.0, non_engram / 1073741824.0);
    all_ranks += stats->file_bytes;
  }
  // Together the ranks read each split byte once and each replicated byte once per rank: less than tp wholes.
  EXPECT_LT(all_ranks, kTp * non_engram / 2);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dsv4
