// The per-step budget: its arithmetic, the rows and times of the steps it shapes, and that outputs do not depend on it
// (every stream equals its serial reference, alone or beside a prompt chunked by the budget).
#include "lanes/step_budget.h"

#include <gtest/gtest.h>

#include "cache/prompt_cache.h"
#include "lanes/lane_host.h"
#include "lanes/test_support.h"

namespace dsv4::lanes {
namespace {

using testing::Collector;
using testing::serial_reference;

Request request_of(int64_t length, uint64_t salt, int32_t max_tokens, bool sampled, bool draft) {
  Request r;
  for (int64_t i = 0; i < length; ++i)
    r.prompt.push_back(1 + static_cast<TokenId>(splitmix64_nth(salt, static_cast<uint64_t>(i) + 1) % 60));
  if (sampled) {
    r.sampling = SamplingParams{0.9f, 0, 0.95f, 0.0f};
    r.seed = salt * 7919;
  }
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.draft = draft;
  return r;
}

// The prompt rows and window rows of one round (one step: FakeBackend runs it as a prefill call, then a verify call).
struct StepRows {
  int64_t prefill = 0;
  int64_t verify = 0;
};

StepRows step_once(LaneHost& host, FakeBackend& fake) {
  fake.clear_calls();
  host.step();
  StepRows rows;
  for (const FakeCall& c : fake.calls()) {
    for (auto [sid, n] : c.streams) {
      if (c.kind == FakeCall::Kind::prefill) rows.prefill += n;
      if (c.kind == FakeCall::Kind::verify) rows.verify += n;
    }
  }
  return rows;
}

TEST(StepBudget, ChunkArithmetic) {
  StepCosts costs;
  StepBudget budget{.prefill_rows = 256, .step_rows = 0, .step_ns = 0, .floor_rows = 8};
  EXPECT_EQ(prefill_chunk(budget, costs, 40), 256);  // no budget: the prefill limit
  budget.step_rows = 64;
  EXPECT_EQ(prefill_chunk(budget, costs, 40), 24);  // the row budget's rest
  EXPECT_EQ(prefill_chunk(budget, costs, 60), 8);   // less than the floor left: the floor
  EXPECT_EQ(prefill_chunk(budget, costs, 64), 8);
  budget.step_rows = 0;
  budget.step_ns = 20'000;
  EXPECT_EQ(prefill_chunk(budget, costs, 4), 256);  // nothing timed yet: no prediction
  costs.observe(0, 4, 4'000);                       // 1000 ns a window row
  EXPECT_EQ(prefill_chunk(budget, costs, 4), 256);  // the prompt cost is not known yet
  costs.observe(100, 4, 14'000);                    // what the windows leave: 100 ns a prompt row
  EXPECT_EQ(costs.verify_ns_per_row(), 1000.0);
  EXPECT_EQ(costs.prefill_ns_per_row(), 100.0);
  EXPECT_EQ(prefill_chunk(budget, costs, 4), 160);   // (20000 - 4 * 1000) / 100
  EXPECT_EQ(prefill_chunk(budget, costs, 0), 200);   // 20000 / 100
  EXPECT_EQ(prefill_chunk(budget, costs, 19), 10);   // (20000 - 19000) / 100
  EXPECT_EQ(prefill_chunk(budget, costs, 25), 8);    // past the budget already: the floor
  budget.step_rows = 150;
  EXPECT_EQ(prefill_chunk(budget, costs, 4), 146);   // both budgets: the smaller rest
  // Later steps move an estimate a quarter of the way to what they show.
  costs.observe(100, 0, 20'000);
  EXPECT_EQ(costs.prefill_ns_per_row(), 125.0);  // 100 + (200 - 100) / 4
  costs.observe(0, 8, 4'000);
  EXPECT_EQ(costs.verify_ns_per_row(), 875.0);  // 1000 + (500 - 1000) / 4
  // Before any verify cost, a step of both kinds gives the verify cost what the prompt cost leaves.
  StepCosts fresh;
  fresh.observe(10, 5, 6'000);  // neither known: nothing learned
  EXPECT_FALSE(fresh.knows_prefill() || fresh.knows_verify());
  fresh.observe(10, 0, 1'000);
  fresh.observe(10, 5, 6'000);
  EXPECT_EQ(fresh.verify_ns_per_row(), 1000.0);  // (6000 - 10 * 100) / 5
}

// Several streams decode (drafted and not, greedy and sampled) when long prompts arrive; each budget chunks them
// differently, and every stream's tokens equal its serial reference (what it gives alone).
TEST(StepBudget, ConcurrentEqualsSolo) {
  struct Case {
    const char* name;
    int32_t step_rows;
    int64_t step_ns;
  };
  for (const Case& c : {Case{"off", 0, 0}, Case{"rows", 12, 0}, Case{"tight rows", 3, 0},
                        Case{"time", 0, 30'000}, Case{"both", 20, 15'000}}) {
    ManualClock clock;
    FakeBackendOptions fo;
    fo.clock = &clock;
    fo.call_ns = 2'000;
    fo.row_ns = 700;
    fo.prefill_row_ns = 60;
    FakeBackend fake(fo);
    LaneHost host(fake, LaneHostOptions{.prefill_rows = 128, .step_rows = c.step_rows, .step_ns = c.step_ns,
                                        .min_step_prefill_rows = 5, .clock = &clock});
    auto sink = std::make_shared<Collector>();
    std::vector<std::pair<RequestId, Request>> runs;
    for (uint64_t i = 0; i < 5; ++i) {
      Request r = request_of(1 + static_cast<int64_t>(i) * 3, 10 + i, 60, i % 2 == 1, i % 3 != 0);
      runs.push_back({*host.submit(r, sink), r});
    }
    for (int i = 0; i < 4; ++i) host.step();
    for (uint64_t i = 0; i < 2; ++i) {
      Request r = request_of(i == 0 ? 700 : 230, 50 + i, 20, i == 1, true);
      runs.push_back({*host.submit(r, sink), r});
      host.step();
    }
    host.run_until_idle();
    for (const auto& [id, r] : runs) {
      const testing::Outcome o = sink->get(id);
      EXPECT_EQ(o.tokens, serial_reference(fake, r)) << c.name << " request " << id;
      EXPECT_EQ(o.finish_count, 1);
    }
    EXPECT_EQ(fake.open_streams(), 0);
  }
}

// With a row budget every step holds at most step_rows rows, or its windows plus the floor when they leave less than
// the floor; the prompt takes exactly that rest, so it fills every step while the streams decode.
TEST(StepBudget, RowBudgetHoldsEveryStepAndThePromptAdvances) {
  for (int32_t step_rows : {16, 6}) {
    FakeBackend fake({});
    const int64_t floor = std::min(4, step_rows / 2);  // a row budget lowers the floor to half of it
    LaneHost host(fake, LaneHostOptions{.prefill_rows = 64, .step_rows = step_rows, .min_step_prefill_rows = 4});
    auto sink = std::make_shared<Collector>();
    std::vector<std::pair<RequestId, Request>> runs;
    for (uint64_t i = 0; i < 6; ++i) {
      Request r = request_of(2, 20 + i, 400, false, true);  // drafted: windows of 1 to 5 rows
      runs.push_back({*host.submit(r, sink), r});
    }
    for (int i = 0; i < 3; ++i) host.step();
    Request big = request_of(500, 99, 5, true, true);
    const RequestId bid = *host.submit(big, sink);
    runs.push_back({bid, big});
    int64_t filled = 0;
    int rounds = 0, floor_rounds = 0;
    while (filled < 499) {
      const StepRows rows = step_once(host, fake);
      const int64_t rest = std::max<int64_t>(step_rows - rows.verify, floor);
      EXPECT_GT(rows.verify, 0);  // the decoding streams still run
      EXPECT_LE(rows.verify, step_rows);
      EXPECT_EQ(rows.prefill, std::min(rest, 499 - filled)) << "step_rows " << step_rows << " round " << rounds;
      EXPECT_LE(rows.verify + rows.prefill, std::max<int64_t>(step_rows, rows.verify + floor));
      EXPECT_EQ(host.status().prefill_chunk_rows, rest);
      if (step_rows - rows.verify < floor) ++floor_rounds;
      filled += rows.prefill;
      ASSERT_EQ(sink->get(bid).prefill_rows.back(), filled);
      ASSERT_LT(++rounds, 1000);
    }
    EXPECT_GT(floor_rounds, 0) << step_rows;  // the windows did fill the budget, and the prompt went on by the floor
    host.run_until_idle();
    for (const auto& [id, r] : runs) EXPECT_EQ(sink->get(id).tokens, serial_reference(fake, r)) << id;
  }
}

// A row budget lowers the floor to half of it: with 8 rows a step (the default floor is 64) a prompt takes 7 rows
// beside one one-row window, and 4 beside a forced window that fills the budget.
TEST(StepBudget, RowBudgetHalvesTheFloor) {
  FakeBackend fake({});
  LaneHost host(fake, LaneHostOptions{.prefill_rows = 64, .step_rows = 8});
  auto sink = std::make_shared<Collector>();
  Request a = request_of(1, 1, 40, false, false);
  Request b = request_of(30, 2, 2, false, false);
  Request forced = request_of(1, 3, 20, false, false);
  forced.forced_tokens.assign(12, 5);
  const RequestId aid = *host.submit(a, sink);
  host.step();
  const RequestId bid = *host.submit(b, sink);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(step_once(host, fake).prefill, 7);
  const RequestId fid = *host.submit(forced, sink);
  StepRows rows = step_once(host, fake);  // the new stream is served first: 8 rows (the budget caps windows)
  EXPECT_EQ(rows.verify, 8);
  EXPECT_EQ(rows.prefill, 4);  // the floor
  rows = step_once(host, fake);  // a's row, then the pending row and the 5 forced tokens left
  EXPECT_EQ(rows.verify, 7);
  EXPECT_EQ(rows.prefill, 4);  // the floor: the prompt's last 4 rows
  EXPECT_EQ(sink->get(bid).prefill_rows, (std::vector<int64_t>{7, 14, 21, 25, 29}));
  host.run_until_idle();
  EXPECT_EQ(sink->get(aid).tokens, serial_reference(fake, a));
  EXPECT_EQ(sink->get(bid).tokens, serial_reference(fake, b));
  EXPECT_EQ(sink->get(fid).tokens, serial_reference(fake, forced));
}

// Chunks cut by the budget still end on the prompt cache's pages where one lies inside them, so a snapshot is kept
// at every page.
TEST(StepBudget, ChunksKeepThePromptCachePages) {
  FakeBackend fake({});
  cache::PromptCacheOptions co{.page_tokens = 16, .ram_bytes = 1 << 20};
  co.model_id = fake.info().model_id;
  co.snapshot_version = fake.info().snapshot_version;
  co.row_tables = cache_row_tables(fake.info());
  std::unique_ptr<cache::PromptCache> cache = std::move(cache::PromptCache::open(co)).value();
  LaneHost host(fake, LaneHostOptions{.prefill_rows = 64, .step_rows = 24, .min_step_prefill_rows = 4,
                                      .cache = cache.get()});
  auto sink = std::make_shared<Collector>();
  Request a = request_of(1, 1, 200, false, false);  // one window row a step: 23 rows left for the prompt
  Request big = request_of(101, 2, 3, false, false);
  const RequestId aid = *host.submit(a, sink);
  host.step();
  const RequestId bid = *host.submit(big, sink);
  for (int i = 0; i < 9; ++i) host.step();
  // Rests of 23 rows end on the last page boundary inside them: 16, 32, 48, 64, 80, 96, then the last 4 rows.
  EXPECT_EQ(sink->get(bid).prefill_rows, (std::vector<int64_t>{16, 32, 48, 64, 80, 96, 100}));
  EXPECT_EQ(cache->stats().ram_entries, 6);
  host.run_until_idle();
  EXPECT_EQ(sink->get(aid).tokens, serial_reference(fake, a));
  EXPECT_EQ(sink->get(bid).tokens, serial_reference(fake, big));
}

// With a time budget and known costs the chunk is what the timed steps predict: the first filling step takes the
// prefill limit (no prompt cost known yet), every later one what the windows leave of step_ns at the learnt cost.
TEST(StepBudget, TimeBudgetChunkFollowsTheArithmetic) {
  ManualClock clock;
  FakeBackendOptions fo;
  fo.clock = &clock;
  fo.call_ns = 0;
  fo.row_ns = 1'000;         // a window row
  fo.prefill_row_ns = 100;   // a prompt row
  FakeBackend fake(fo);
  LaneHost host(fake, LaneHostOptions{.prefill_rows = 256, .step_ns = 20'000, .min_step_prefill_rows = 8,
                                      .clock = &clock});
  auto sink = std::make_shared<Collector>();
  for (TokenId t = 1; t <= 4; ++t) (void)host.submit(request_of(1, 30 + t, 500, false, false), sink);
  host.step();  // four one-row windows: 4000 ns, so 1000 ns a window row
  EXPECT_EQ(clock.now_ns(), 4'000);
  const RequestId bid = *host.submit(request_of(1001, 7, 2, false, false), sink);
  std::vector<int64_t> times;
  for (int i = 0; i < 7; ++i) {
    const int64_t before = clock.now_ns();
    host.step();
    times.push_back(clock.now_ns() - before);
  }
  // 256 rows (4 * 1000 + 256 * 100 = 29600 ns, so 100 ns a prompt row), then (20000 - 4 * 1000) / 100 = 160 a step.
  EXPECT_EQ(sink->get(bid).prefill_rows, (std::vector<int64_t>{256, 416, 576, 736, 896, 1000}));
  EXPECT_EQ(times, (std::vector<int64_t>{29'600, 20'000, 20'000, 20'000, 20'000, 14'400, 5'000}));
  EXPECT_EQ(host.status().prefill_chunk_rows, 160);
}

}  // namespace
}  // namespace dsv4::lanes
