// DSpark drafts of several streams in one batched pass (Forward::draft_batch) against the same streams drafted one at
// a time, on a preset (tiny by default; DSV4_GPU_PRESET = small selects the larger one): every drafted token,
// probability, confidence and logit is equal bit for bit — in one group, in groups split by a small max_call_rows, in
// another order and beside other streams — and the lane adapter's proposals for several requests in one call equal
// those of one request per call. V4-0731 weights have no drafter run (refused, as the oracle's): skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "forward_testing.h"
#include "preset_weights_testing.h"
#include "backends/cuda/forward/forward.h"
#include "engine/lane_backend.h"
#include "family/deepseek_v41/preset.h"

namespace dsv4::cuda {
namespace {

using namespace gpu_testing;  // prompts, rows, preset_name, variant_name
using engine::Piece;

std::shared_ptr<const family::Model> weights() {
  static std::shared_ptr<const family::Model> w = chosen_preset_weights(1);
  return w;
}

bool no_drafter() { return weights()->config.variant == family::Variant::v4; }

std::unique_ptr<Forward> cuda_forward(int64_t max_call_rows) {
  static std::shared_ptr<const ModelDevice> model;
  if (!model) model = gpu_testing::upload(weights());
  if (!model) return nullptr;
  ForwardOptions o;
  o.max_context = 4096;
  o.max_rollback = 16;
  o.max_call_rows = max_call_rows;
  auto f = Forward::create(model, o);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? std::move(*f) : nullptr;
}

// Streams of prompts shorter than the window, longer than the ring, and one rolled back, fed in pieces of at most
// `piece` rows; returns their ids.
std::vector<int32_t> open_streams(Forward& f, int64_t piece) {
  const std::vector<int> lengths = {5, 12, 40, 150, 17, 63};
  std::vector<int32_t> ids;
  for (size_t k = 0; k < lengths.size(); ++k) {
    const auto toks = prompt(lengths[k], 20 + static_cast<int>(k));
    auto s = f.open_stream();
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (!s.ok()) return {};
    for (size_t at = 0; at < toks.size(); at += piece) {
      const size_t end = std::min(toks.size(), at + static_cast<size_t>(piece));
      auto r = f.forward({Piece{*s, std::vector<int32_t>(toks.begin() + at, toks.begin() + end), {}}});
      EXPECT_TRUE(r.ok()) << r.status().to_string();
    }
    ids.push_back(*s);
  }
  EXPECT_TRUE(f.truncate(ids[3], 140).ok());  // ring slots after a rollback
  return ids;
}

// Whether two drafts are equal bit for bit (tokens, probabilities, confidence, logits).
void expect_same(const engine::DraftResult& a, const engine::DraftResult& b, const std::string& what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  EXPECT_EQ(a.probs, b.probs) << what;
  EXPECT_EQ(a.confidence, b.confidence) << what;
  ASSERT_EQ(a.logits.size(), b.logits.size()) << what;
  EXPECT_TRUE(a.logits == b.logits) << what << ": logits differ";
}

// max_call_rows 512: every stream in one group; 12: groups of two streams (dspark_block 5).
void batched_equals_alone(int64_t max_call_rows) {
  auto f = cuda_forward(max_call_rows);
  ASSERT_TRUE(f);
  const std::vector<int32_t> ids = open_streams(*f, std::min<int64_t>(max_call_rows, 64));
  ASSERT_EQ(ids.size(), 6u);
  std::vector<engine::DraftAsk> asks;
  std::vector<engine::DraftResult> alone;
  for (size_t k = 0; k < ids.size(); ++k) {
    asks.push_back(engine::DraftAsk{ids[k], static_cast<int32_t>(100 + 37 * k)});
    auto d = f->draft(asks[k].stream, asks[k].next);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    ASSERT_EQ(d->tokens.size(), static_cast<size_t>(weights()->config.dspark_block_size));
    alone.push_back(std::move(*d));
  }
  auto batch = f->draft_batch(asks, true);
  ASSERT_TRUE(batch.ok()) << batch.status().to_string();
  ASSERT_EQ(batch->size(), asks.size());
  for (size_t k = 0; k < asks.size(); ++k) expect_same((*batch)[k], alone[k], "stream " + std::to_string(k));
  // Another order and a subset: each stream's draft is still its own.
  const std::vector<engine::DraftAsk> some = {asks[4], asks[0], asks[3]};
  auto again = f->draft_batch(some, true);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  expect_same((*again)[0], alone[4], "reordered stream 4");
  expect_same((*again)[1], alone[0], "reordered stream 0");
  expect_same((*again)[2], alone[3], "reordered stream 3");
  // Without logits: the same tokens, probabilities and confidence, no logits.
  auto bare = f->draft_batch(asks, false);
  ASSERT_TRUE(bare.ok()) << bare.status().to_string();
  for (size_t k = 0; k < asks.size(); ++k) {
    EXPECT_TRUE((*bare)[k].logits.empty());
    EXPECT_EQ((*bare)[k].tokens, alone[k].tokens) << k;
    EXPECT_EQ((*bare)[k].probs, alone[k].probs) << k;
    EXPECT_EQ((*bare)[k].confidence, alone[k].confidence) << k;
  }
  // Refusals name the stream; nothing is drafted.
  const std::vector<engine::DraftAsk> bad = {asks[0], engine::DraftAsk{9999, 1}};
  EXPECT_EQ(f->draft_batch(bad, false).status().code(), StatusCode::not_found);
}

TEST(DsparkBatch, BatchedEqualsAloneOneGroup) {
  if (no_drafter()) GTEST_SKIP() << "the V4-0731 drafter is not run";
  batched_equals_alone(512);
}

TEST(DsparkBatch, BatchedEqualsAloneSeveralGroups) {
  if (no_drafter()) GTEST_SKIP() << "the V4-0731 drafter is not run";
  batched_equals_alone(12);
}

// The lane adapter: proposals for every request in one draft call equal one request per call.
TEST(DsparkBatch, LaneBackendProposalsEqualOneAtATime) {
  if (no_drafter()) GTEST_SKIP() << "the V4-0731 drafter is not run";
  auto f = cuda_forward(512);
  ASSERT_TRUE(f);
  engine::LaneBackendOptions lo;
  lo.model_id = "gpu-test";
  auto made = engine::LaneBackend::create(cuda_stream_forward(std::move(f)), 16, lo);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  lanes::Backend& b = **made;
  lanes::StreamSpec spec;
  spec.max_rows = 400;
  std::vector<lanes::DraftRequest> requests;
  std::vector<std::vector<int32_t>> prompts;
  for (int k = 0; k < 5; ++k) prompts.push_back(prompt(8 + 29 * k, 40 + k));
  for (int k = 0; k < 5; ++k) {
    ASSERT_TRUE(b.open(k + 1, spec).ok());
    const auto& t = prompts[k];
    lanes::Piece p{static_cast<lanes::StreamId>(k + 1), 0, {t.data(), t.size() - 1}};
    ASSERT_TRUE(b.prefill({&p, 1}).ok());
    requests.push_back(lanes::DraftRequest{static_cast<lanes::StreamId>(k + 1), t.back(),
                                           static_cast<int64_t>(t.size() - 1), 1 + k % 4});
  }
  std::vector<lanes::DraftProposal> together;
  ASSERT_TRUE(b.draft(requests, &together).ok());
  ASSERT_EQ(together.size(), requests.size());
  for (size_t k = 0; k < requests.size(); ++k) {
    std::vector<lanes::DraftProposal> one;
    ASSERT_TRUE(b.draft({&requests[k], 1}, &one).ok());
    EXPECT_EQ(together[k].tokens.size(), static_cast<size_t>(requests[k].depth)) << k;
    EXPECT_EQ(one[0].tokens, together[k].tokens) << k;
    EXPECT_EQ(one[0].probabilities, together[k].probabilities) << k;
  }
}

}  // namespace
}  // namespace dsv4::cuda
