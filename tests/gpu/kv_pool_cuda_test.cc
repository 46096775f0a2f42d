// The KV pool on CUDA (docs/kv-pool.md), on the preset and variant of DSV4_GPU_PRESET / DSV4_GPU_VARIANT (tiny, v41
// by default): where a stream's rows sit changes no bit — pages of the smallest size and of the default give the same
// logits, decode steps and snapshot bytes, and a snapshot taken with one restores into the other; a fixed pool counts
// its slots and pages, refuses what it cannot hold with a clear error and leaves every stream as it was, gives pages
// back on rollback and close, restores into a full pool, and tells the lane adapter what a stream takes.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

#include "backends/cuda/forward/forward.h"
#include "engine/lane_backend.h"
#include "family/deepseek_v41/preset.h"
#include "forward_testing.h"
#include "preset_weights_testing.h"

namespace dsv4::cuda {
namespace {

using namespace gpu_testing;  // prompt, all_rows, argmax
using engine::Piece;

std::shared_ptr<const ModelDevice> model() {
  static std::shared_ptr<const ModelDevice> m = gpu_testing::upload(chosen_preset_weights(3));
  return m;
}

// The smallest page the model allows: its largest compression ratio.
int64_t smallest_page() {
  int64_t r = 1;
  for (int ratio : model()->config.compress_ratios) r = std::max<int64_t>(r, ratio);
  return r;
}

std::unique_ptr<Forward> forward(int64_t page_positions, int32_t pool_streams = 0, int64_t pool_positions = 0) {
  if (!model()) return nullptr;
  ForwardOptions o;
  o.max_context = 2048;
  o.max_rollback = 16;
  o.max_call_rows = 512;
  o.kv_page_positions = page_positions;
  o.kv_pool_streams = pool_streams;
  o.kv_pool_positions = pool_positions;
  auto f = Forward::create(model(), o);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? std::move(*f) : nullptr;
}

std::vector<float> feed(Forward& f, int32_t s, const std::vector<int32_t>& tokens, bool all = false) {
  std::vector<int32_t> rows = all ? all_rows(static_cast<int>(tokens.size()))
                                  : std::vector<int32_t>{static_cast<int32_t>(tokens.size()) - 1};
  auto r = f.forward({Piece{s, tokens, rows}});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? (*r)[0].logits : std::vector<float>{};
}

int32_t greedy(const std::vector<float>& logits) {
  const int64_t V = model()->config.vocab;
  return static_cast<int32_t>(argmax(&logits[logits.size() - V], V));
}

// Pages of smallest_page() positions (every table crosses a page every few rows) against the default pages.
TEST(KvPool, PageSizeChangesNoBit) {
  auto small = forward(smallest_page()), dflt = forward(0);
  ASSERT_TRUE(small && dflt);
  ASSERT_LT(small->page_layout().page_positions, dflt->page_layout().page_positions);
  const int32_t a = *small->open_stream(), b = *dflt->open_stream();
  const std::vector<int32_t> p = prompt(700, 4);
  int64_t at = 0;
  std::vector<float> la, lb;
  for (int64_t n : {37, 1, 300, 362}) {  // every row's logits of pieces of odd sizes
    const std::vector<int32_t> piece(p.begin() + at, p.begin() + at + n);
    la = feed(*small, a, piece, true);
    lb = feed(*dflt, b, piece, true);
    ASSERT_FALSE(la.empty());
    EXPECT_TRUE(la == lb) << "piece at " << at;
    at += n;
  }
  EXPECT_EQ(small->length(a).value(), 700);
  EXPECT_EQ(small->page_layout().pages_for(700), (700 + smallest_page() - 1) / smallest_page());
  auto sa = small->snapshot(a), sb = dflt->snapshot(b);
  ASSERT_TRUE(sa.ok() && sb.ok());
  EXPECT_TRUE(*sa == *sb) << "the snapshot bytes depend on the pages";
  for (int i = 0; i < 24; ++i) {  // decode steps (CUDA graphs on both)
    const int32_t t = greedy(la);
    la = feed(*small, a, {t});
    lb = feed(*dflt, b, {t});
    ASSERT_TRUE(la == lb) << "decode step " << i;
  }
  // A snapshot of one restores into the other, whole or split, and both go on alike.
  auto whole = small->snapshot(a);
  auto parts = small->snapshot_parts(a, 0);
  ASSERT_TRUE(whole.ok() && parts.ok());
  const int32_t c = *dflt->open_stream(), d = *dflt->open_stream();
  ASSERT_TRUE(dflt->restore(c, *whole).ok());
  std::vector<std::vector<std::span<const uint8_t>>> chunks;
  for (const std::vector<uint8_t>& rows : parts->rows) {  // each table in two chunks, cut mid-table
    const size_t half = rows.size() / 2;
    chunks.push_back({std::span<const uint8_t>(rows).first(half), std::span<const uint8_t>(rows).subspan(half)});
  }
  ASSERT_TRUE(dflt->restore_parts(d, parts->bounded, chunks).ok());
  for (int i = 0; i < 6; ++i) {
    const int32_t t = greedy(la);
    la = feed(*small, a, {t});
    const std::vector<float> lc = feed(*dflt, c, {t}), ld = feed(*dflt, d, {t});
    ASSERT_TRUE(la == lc) << "after the whole restore, step " << i;
    ASSERT_TRUE(la == ld) << "after the split restore, step " << i;
  }
}

// A fixed pool of 2 slots and the pages of 2 x page_positions positions.
TEST(KvPool, FixedPoolRefusesWhatItCannotHoldAndLosesNothing) {
  auto ref = forward(0);
  ASSERT_TRUE(ref);
  const int64_t P = ref->page_layout().page_positions;
  auto f = forward(0, 2, 2 * P);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kv_pool().shape().pages, 2);
  EXPECT_EQ(f->kv_pool().free_slabs(), 2);
  const int32_t a = *f->open_stream(), b = *f->open_stream();
  const auto third = f->open_stream();
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::resource_exhausted);
  EXPECT_NE(third.status().message().find("stream slots"), std::string::npos) << third.status().message();

  const int32_t r = *ref->open_stream();
  const std::vector<int32_t> p = prompt(static_cast<int>(P + 5), 9);
  std::vector<float> la = feed(*f, a, p), lr = feed(*ref, r, p);
  ASSERT_TRUE(la == lr);
  EXPECT_EQ(f->kv_pool().free_pages(), 0);
  // b needs a page and none is free: refused, nothing changed.
  const auto refused = f->forward({Piece{b, prompt(10, 2), {9}}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::resource_exhausted);
  EXPECT_NE(refused.status().message().find("KV pool"), std::string::npos) << refused.status().message();
  EXPECT_EQ(f->length(b).value(), 0);
  EXPECT_EQ(f->length(a).value(), P + 5);
  // A refused call beside another stream's rows leaves that stream alone too.
  const auto both = f->forward({Piece{a, {greedy(la)}, {0}}, Piece{b, prompt(10, 2), {9}}});
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(f->length(a).value(), P + 5);
  for (int i = 0; i < 6; ++i) {  // a goes on within its pages, as the growing pool's stream does
    const int32_t t = greedy(la);
    la = feed(*f, a, {t});
    lr = feed(*ref, r, {t});
    ASSERT_TRUE(la == lr) << "step " << i;
  }
  // A rollback (14 rows, within max_rollback 16) into the first page gives the second back; b then fits.
  ASSERT_TRUE(f->truncate(a, P - 3).ok());
  ASSERT_TRUE(ref->truncate(r, P - 3).ok());
  EXPECT_EQ(f->kv_pool().free_pages(), 1);
  const std::vector<float> lb = feed(*f, b, prompt(10, 2));
  ASSERT_FALSE(lb.empty());
  EXPECT_EQ(f->kv_pool().free_pages(), 0);
  la = feed(*f, a, {5, 6});
  lr = feed(*ref, r, {5, 6});
  EXPECT_TRUE(la == lr) << "after the rollback";  // P - 1 positions: still the first page
  // Restoring into a full pool: the stream's own slab and pages are reused.
  auto snap = f->snapshot(b);
  ASSERT_TRUE(snap.ok());
  ASSERT_TRUE(f->close_stream(a).ok());
  EXPECT_EQ(f->kv_pool().free_slabs(), 1);
  EXPECT_EQ(f->kv_pool().free_pages(), 1);
  const int32_t c = *f->open_stream();
  ASSERT_TRUE(f->restore(c, *snap).ok());
  EXPECT_EQ(f->length(c).value(), 10);
  ASSERT_TRUE(f->restore(b, *snap).ok());
  EXPECT_EQ(f->kv_pool().free_pages(), 0);
  const std::vector<float> xb = feed(*f, b, {7}), xc = feed(*f, c, {7});
  EXPECT_TRUE(xb == xc);
  // Damaged bytes leave the stream empty and usable, its pages back in the pool.
  std::vector<uint8_t> bad = *snap;
  bad[24 + 10 * 8] ^= 0xff;  // the caches' own magic, after the header and 10 history ids
  EXPECT_FALSE(f->restore(c, bad).ok());
  EXPECT_EQ(f->length(c).value(), 0);
  EXPECT_EQ(f->kv_pool().free_pages(), 1);
  EXPECT_FALSE(feed(*f, c, prompt(4, 1)).empty());
}

// The lane adapter admits by the pool: a stream of n positions takes its pages, the budget is the pool's pages.
TEST(KvPool, LaneAdapterAdmitsByThePool) {
  auto f = forward(0, 3, 5000);
  ASSERT_TRUE(f);
  const family::PageLayout layout = f->page_layout();
  const int64_t pages = f->kv_pool().shape().pages;
  EXPECT_EQ(pages, layout.pages_for(5000));
  engine::LaneBackendOptions bo;
  bo.model_id = "kv-pool-test";
  bo.max_streams = 3;
  bo.max_context = 2048;
  auto lane = engine::LaneBackend::create(cuda_stream_forward(std::move(f)), 16, bo);
  ASSERT_TRUE(lane.ok()) << lane.status().to_string();
  EXPECT_EQ((*lane)->info().memory_budget_bytes, pages * layout.page_bytes);
  for (int64_t n : {int64_t{0}, int64_t{1}, layout.page_positions, layout.page_positions + 1, int64_t{2048}})
    EXPECT_EQ((*lane)->stream_bytes(n), layout.pages_for(n) * layout.page_bytes) << n;
}

}  // namespace
}  // namespace dsv4::cuda
