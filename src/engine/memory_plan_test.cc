// The memory plan of V4.1-Flash against numbers computed by hand (sources in each comment), and its verdicts.
#include "engine/memory_plan.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "engine/byte_size.h"
#include "engine/vision_memory.h"
#include "family/deepseek_v41/preset.h"

namespace dsv4::engine {
namespace {

MemoryPlanInputs v41(int32_t tp, int64_t context, int32_t parallel) {
  MemoryPlanInputs in;
  in.config = family::v41_flash_config();
  in.tp = tp;
  in.max_context = context;
  in.parallel = parallel;
  return in;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// TP 8, context 65,536, 4 streams, 4,096 rows per call, rollback 128, drafter on, Engram pinned:
// - weights: 4,662,950,472 + 303,335,934,720 / 8 = 42,579,942,312 (weight_share_test.cc, from model-spec.md §5, §7);
// - caches: 4 x 67,287,040: one stream at 65,536 positions holds 890 B per position (model-spec.md §4.4:
//   58,327,040, 256 pages of 256 positions) + window rings 43 x 256 x 528 = 5,812,224 + the ratio-2 sources' fp32
//   projection rings 3 x 2 x 256 x 512 x 4 = 3,145,728 + its page table of 256 pointers, 2,048;
// - scratch: the CUDA backend's sizing (backends/cuda/forward/forward.cc, attention.cc, dspark_device.cc) evaluated by hand
//   for a rank's config (8 heads, 1 output group): forward 3,613,097,984 (886,497,280 floats: 231,112,704 of
//   streams, taps and Engram rows + 655,384,576 of head rows, + 64 MiB); attention 2,050,794,496 (call tables
//   292,753,408 with 268,439,552 of index-score mask bytes; per layer 1,758,041,088 with 1,073,758,208 of
//   index scores [4096, 65537] f32 and 92,274,688 of bounded replay's kept rows [4096, 5120] + [4096, 512]);
//   tensor-parallel gathers 7,675,674,624; drafter 27,204,112; call metadata 21,102,592 (15,728,640 of
//   piece tables 4096 x 40 x 96 B, 5,242,880 of bounded replay's row tables 4096 x 40 x 32 B, 131,072 of
//   tapped and logit rows 4 x 4096 x 8 B) + the many-row GEMM's pooled quantized rows 268,435,456 (256 MiB) =
//   289,538,048; total 13,656,309,264;
// - runtime: 1 GiB context + 256 MiB graphs + 1 GiB NCCL = 2,415,919,104; margin 2% of the sum above.
TEST(MemoryPlan, V41Tp8ByHand) {
  MemoryPlanInputs in = v41(8, 65536, 4);
  in.engram = EngramPlacement::pinned;
  auto p = plan_memory(in);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->stream_bytes, 67287040);
  EXPECT_EQ(p->stream_bytes_per_position, 890);
  EXPECT_EQ(p->scratch.forward, 3613097984);
  EXPECT_EQ(p->scratch.attention, 2050794496);
  EXPECT_EQ(p->scratch.tensor_parallel, 7675674624);
  EXPECT_EQ(p->scratch.drafter, 27204112);
  EXPECT_EQ(p->scratch.other, 21102592 + 268435456);
  ASSERT_EQ(p->ranks.size(), 8u);
  for (const RankMemory& r : p->ranks) {
    EXPECT_EQ(r.weights, 42579942312);
    EXPECT_EQ(r.caches, 4 * 67287040);
    EXPECT_EQ(r.scratch, 13656309264);
    EXPECT_EQ(r.runtime, 2415919104);
    const int64_t rest = 42579942312 + 4 * 67287040 + 13656309264 + 2415919104;  // 58,921,318,840
    EXPECT_EQ(r.margin, rest / 50);                                                // 2%
  }
  // Host: one pinned copy of the Engram tables and scales (202,758,032,400 B, model-spec.md §7.3), 8 rank
  // processes x (512 MiB staging + 1 GiB runtime), 8 x 4 x 65,536 x 8 B of token history, 256 MiB prompt cache.
  EXPECT_EQ(p->host.engram, 202758032400);
  EXPECT_EQ(p->host.staging, 8 * (int64_t{512} << 20));
  EXPECT_EQ(p->host.runtime, 8 * kGiB);
  EXPECT_EQ(p->host.history, 8 * 4 * 65536 * 8);
  EXPECT_EQ(p->host.need(), 202758032400 + 12 * kGiB + 16 * kMiB + 256 * kMiB);
}

// Without --engram the tables stay mapped from their files: no anonymous host memory for them, the same GPU plan.
TEST(MemoryPlan, EngramMappedByDefault) {
  auto p = plan_memory(v41(8, 65536, 4));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->inputs.engram, EngramPlacement::mapped);
  EXPECT_EQ(p->host.engram, 0);
  EXPECT_EQ(p->host.engram_page_cache, 202758032400);
  EXPECT_EQ(p->host.need(), 12 * kGiB + 16 * kMiB + 256 * kMiB);
  for (const RankMemory& r : p->ranks) EXPECT_EQ(r.weights, 42579942312);
}

// One GPU of 80 GiB holds less than a third of the 286.8 GiB of weights: refused, naming the numbers and --tp 8
// (which fits: 55.6 GiB per GPU at context 65,536, see above) as the fix.
TEST(MemoryPlan, RefusesOneGpuAndSuggestsMoreRanks) {
  MemoryPlanInputs in = v41(1, 65536, 4);
  in.device_memory = *parse_byte_size("80G");
  in.host_memory = *parse_byte_size("1T");
  auto p = plan_memory(in);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->ranks[0].weights, 307998885192);
  EXPECT_FALSE(p->devices_fit());
  EXPECT_TRUE(p->host_fits());
  const Status st = check_fits(*p);
  ASSERT_EQ(st.code(), StatusCode::resource_exhausted);
  const std::string& m = st.message();
  EXPECT_TRUE(has(m, "GPU 0 needs ")) << m;
  EXPECT_TRUE(has(m, "weights 286.85 GiB")) << m;  // 307,998,885,192 / 2^30
  EXPECT_TRUE(has(m, "has 80.00 GiB")) << m;
  EXPECT_TRUE(has(m, "--tp 2 would need")) << m;
  // V41Tp8ByHand's GPU total (the Engram tables stay on the host either way): 58,921,318,840 + 2% margin =
  // 60,099,745,216 B = 55.97 GiB (55.96 before the KV pool's piece records grew to 96 B, 55.71 before the many-row GEMM's 256 MiB pool, 55.61 before bounded replay's
  // 97,648,640 B of gathers and row tables).
  EXPECT_TRUE(has(m, "--tp 8 would need 55.97 GiB per GPU (fits)")) << m;
  EXPECT_TRUE(has(m, "EXL3 pack")) << m;
  EXPECT_TRUE(has(m, "--context 16 would save")) << m;  // not enough: nothing shorter fits
  EXPECT_TRUE(has(m, "--parallel 1 would save")) << m;
  EXPECT_FALSE(has(m, "host needs")) << m;
}

TEST(MemoryPlan, Tp8FitsAnH200) {
  MemoryPlanInputs in = v41(8, 65536, 4);
  in.device_memory = *parse_byte_size("141G");
  in.host_memory = *parse_byte_size("1T");
  auto p = plan_memory(in);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_TRUE(p->fits());
  EXPECT_TRUE(check_fits(*p).ok());
  const std::string table = format_memory_plan(*p);
  for (int r = 0; r < 8; ++r) EXPECT_TRUE(has(table, fmt::format("GPU {}", r))) << table;
  EXPECT_TRUE(has(table, "verdict: fits")) << table;
}

// A host that cannot pin the 188.8 GiB of Engram tables: refused naming host memory; mapping them needs only
// staging, runtime, history and the prompt cache.
TEST(MemoryPlan, RefusesPinnedEngramOnASmallHost) {
  MemoryPlanInputs in = v41(8, 4096, 4);
  in.device_memory = *parse_byte_size("141G");
  in.host_memory = *parse_byte_size("64G");
  in.engram = EngramPlacement::pinned;
  auto p = plan_memory(in);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_TRUE(p->devices_fit());
  EXPECT_FALSE(p->host_fits());
  const Status st = check_fits(*p);
  ASSERT_EQ(st.code(), StatusCode::resource_exhausted);
  // 202,758,032,400 + 12 GiB (8 x 1.5 GiB) + 257 MiB (history, prompt cache) = 201.0848 GiB.
  EXPECT_TRUE(has(st.message(), "host needs 201.08 GiB")) << st.message();
  EXPECT_TRUE(has(st.message(), "Engram tables pinned 188.83 GiB")) << st.message();
  EXPECT_TRUE(has(st.message(), "--engram mapped would need 12.25 GiB of host memory (fits)")) << st.message();
  in.engram = EngramPlacement::mapped;
  auto q = plan_memory(in);
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(q->fits());
  EXPECT_EQ(q->host.engram_page_cache, 202758032400);
}

// Context and streams only move caches and scratch: a shorter context saves what the hand numbers say.
// The device vision tower (serve --backend cuda at tp 1): GPU 0's weights and scratch grow by its bytes.
// Weights 970,514,432: the release table's vision and aligner tensors (970,506,240, weight_share_test.cc) plus
// patch_embed's 4 zero columns of padding (1,024 x 4 x 2 = 8,192); scratch 545,927,936 for 9,198 patches and 1,022
// aligner rows (vision_memory.cc's layout, evaluated by hand).
TEST(MemoryPlan, DeviceVisionTowerOnGpu0) {
  MemoryPlanInputs in = v41(1, 4096, 1);
  auto base = plan_memory(in);
  in.vision_tower = true;
  auto p = plan_memory(in);
  ASSERT_TRUE(base.ok() && p.ok());
  const family::Config& c = in.config;
  EXPECT_EQ(vision_weight_bytes(*c.vision, c.hidden_size), 970514432);
  EXPECT_EQ(vision_device_bytes(*c.vision, c.hidden_size) - 970514432, 545927936);
  EXPECT_EQ(p->ranks[0].weights - base->ranks[0].weights, 970514432);
  EXPECT_EQ(p->ranks[0].scratch - base->ranks[0].scratch, 545927936);
  bool noted = false;
  for (const std::string& n : p->notes) noted |= has(n, "vision tower on GPU 0");
  EXPECT_TRUE(noted);
}

TEST(MemoryPlan, ReplanKeepsWeights) {
  auto p = plan_memory(v41(8, 65536, 4));
  ASSERT_TRUE(p.ok());
  MemoryPlanInputs in = p->inputs;
  in.max_context = 4096;
  in.parallel = 2;
  auto q = replan_runtime(*p, in);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->ranks[0].weights, p->ranks[0].weights);
  // One stream at 4,096 positions: 890 x 4,096 + 5,812,224 + 3,145,728 + a page table of 16 pointers (128 B, 256
  // with its alignment) = 12,603,648 B.
  EXPECT_EQ(q->stream_bytes, 12603648);
  EXPECT_EQ(q->ranks[0].caches, 2 * 12603648);
}

// A KV pool of 100,000 positions for 4 streams of 65,536: 4 slabs (rings 5,812,224 + 3,145,728 and a page table of 256
// pointers, 2,048) and 391 pages of 256 positions x 890 B (227,840 B): 35,840,000 + 89,085,440 = 124,925,440 B.
TEST(MemoryPlan, KvPoolTokens) {
  MemoryPlanInputs in = v41(8, 65536, 4);
  in.kv_pool_tokens = 100000;
  auto p = plan_memory(in);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->ranks[0].caches, 124925440);
  in.kv_pool_tokens = -1;
  EXPECT_FALSE(plan_memory(in).ok());
}

TEST(MemoryPlan, RefusesBadInputsAndUnsplittableModels) {
  MemoryPlanInputs in = v41(3, 4096, 4);
  auto p = plan_memory(in);
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(has(p.status().message(), "--tp 3")) << p.status().message();
  in = v41(1, 0, 4);
  EXPECT_FALSE(plan_memory(in).ok());
  in = v41(1, 4096, 4);
  auto q = plan_memory(in);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(check_fits(*q).code(), StatusCode::invalid_argument);  // no memory sizes given
  EXPECT_TRUE(has(format_memory_plan(*q), "verdict: unknown")) << format_memory_plan(*q);
}

TEST(MemoryPlan, EngramPlacementNames) {
  for (EngramPlacement e : {EngramPlacement::pinned, EngramPlacement::mapped, EngramPlacement::disk})
    EXPECT_EQ(*parse_engram_placement(engram_placement_name(e)), e);
  EXPECT_FALSE(parse_engram_placement("ssd").ok());
}

TEST(MemoryPlan, ReadsMemAvailable) {
  const std::filesystem::path f = std::filesystem::temp_directory_path() / "dsv4_meminfo_test";
  std::ofstream(f) << "MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   20971520 kB\n";
  EXPECT_EQ(*host_memory_available(f.string()), int64_t{20} << 30);
  std::ofstream(f) << "MemTotal:       24000000 kB\n";
  EXPECT_FALSE(host_memory_available(f.string()).ok());
  std::filesystem::remove(f);
}

}  // namespace
}  // namespace dsv4::engine
