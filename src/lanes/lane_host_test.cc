// Lane core equalities on the fake backend: solo/drafted/pieces/concurrent/cancelled runs equal the serial reference;
// a round's drafts go to the backend in one call, and drafting them one stream per call changes nothing.
#include "lanes/lane_host.h"

#include <gtest/gtest.h>

#include "lanes/test_support.h"

namespace dsv4::lanes {
namespace {

using testing::Collector;
using testing::serial_reference;

std::vector<TokenId> make_prompt(int64_t length, uint64_t salt, int32_t vocab) {
  std::vector<TokenId> prompt;
  for (int64_t i = 0; i < length; ++i) {
    prompt.push_back(1 + static_cast<TokenId>(splitmix64_nth(salt, static_cast<uint64_t>(i) + 1) % (vocab - 1)));
  }
  return prompt;
}

Request make_request(int64_t length, uint64_t salt, bool sampled, int32_t max_tokens, bool draft = true) {
  Request r;
  r.prompt = make_prompt(length, salt, FakeBackendOptions{}.vocab_size);
  if (sampled) {
    r.sampling = SamplingParams{0.9f, 0, 0.95f, 0.0f};
    if (salt % 2 == 0) r.seed = salt * 7919;  // half give a seed, half take the prompt's
  }
  r.max_tokens = max_tokens;
  r.draft = draft;
  return r;
}

struct Rig {
  explicit Rig(FakeBackendOptions fake_options = {}, LaneHostOptions host_options = {})
      : fake(fake_options), host(fake, std::move(host_options)), sink(std::make_shared<Collector>()) {}
  RequestId submit(Request r) {
    StatusOr<RequestId> id = host.submit(std::move(r), sink);
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    return id.ok() ? *id : 0;
  }
  std::vector<std::vector<StreamId>> verify_batches() const {
    std::vector<std::vector<StreamId>> out;
    for (const FakeCall& c : fake.calls()) {
      if (c.kind != FakeCall::Kind::verify) continue;
      out.emplace_back();
      for (auto [sid, rows] : c.streams) out.back().push_back(sid);
    }
    return out;
  }
  FakeBackend fake;
  LaneHost host;
  std::shared_ptr<Collector> sink;
};

TEST(LaneHost, SoloEqualsSerialReferenceForPiecesAndDrafts) {
  int64_t drafted = 0, accepted = 0;
  for (bool sampled : {false, true}) {
    for (bool draft : {false, true}) {
      for (int32_t piece_rows : {1, 7, 64, 256}) {
        for (int64_t length : {1, 2, 37, 130, 300}) {
          Rig rig({}, LaneHostOptions{.prefill_rows = piece_rows});
          Request r = make_request(length, 100 + static_cast<uint64_t>(length), sampled, 40, draft);
          const std::vector<TokenId> expected = serial_reference(rig.fake, r);
          const RequestId id = rig.submit(r);
          rig.host.run_until_idle();
          testing::Outcome o = rig.sink->get(id);
          EXPECT_EQ(o.tokens, expected) << "sampled " << sampled << " draft " << draft << " pieces " << piece_rows
                                        << " length " << length;
          EXPECT_EQ(o.finish_count, 1);
          EXPECT_EQ(o.finish.usage.completion_tokens, static_cast<int64_t>(expected.size()));
          EXPECT_EQ(rig.fake.open_streams(), 0);
          if (!draft) EXPECT_EQ(o.finish.usage.drafted_tokens, 0);
          drafted += o.finish.usage.drafted_tokens;
          accepted += o.finish.usage.accepted_tokens;
        }
      }
    }
  }
  // Both verification paths ran: drafts were accepted and rejected.
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);
}

TEST(LaneHost, ConcurrentStreamsEqualEachAlone) {
  FakeBackendOptions fo;
  fo.max_streams = 3;
  fo.max_verify_rows = 12;
  Rig rig(fo, LaneHostOptions{.max_batch_streams = 2, .prefill_rows = 50});
  struct Plan {
    int64_t length;
    bool sampled;
    int32_t max_tokens;
    int arrive_round;
  };
  const Plan plans[] = {{300, false, 30, 0}, {1, true, 50, 0},  {77, true, 20, 0},  {150, false, 60, 2},
                        {5, false, 10, 3},   {220, true, 35, 3}, {64, true, 45, 9},  {129, false, 25, 15}};
  std::vector<RequestId> ids(std::size(plans), 0);
  std::vector<std::vector<TokenId>> expected;
  for (size_t i = 0; i < std::size(plans); ++i) {
    expected.push_back(serial_reference(rig.fake, make_request(plans[i].length, 500 + i, plans[i].sampled,
                                                               plans[i].max_tokens)));
  }
  for (int round = 0; round < 2000; ++round) {
    for (size_t i = 0; i < std::size(plans); ++i) {
      if (plans[i].arrive_round == round) {
        ids[i] = rig.submit(make_request(plans[i].length, 500 + i, plans[i].sampled, plans[i].max_tokens));
      }
    }
    if (!rig.host.step() && round > 20) break;
  }
  for (size_t i = 0; i < std::size(plans); ++i) {
    EXPECT_EQ(rig.sink->get(ids[i]).tokens, expected[i]) << "request " << i;
    EXPECT_EQ(rig.sink->get(ids[i]).finish_count, 1);
  }
  EXPECT_EQ(rig.fake.open_streams(), 0);
  // Batches really were shared.
  size_t widest = 0;
  for (const auto& batch : rig.verify_batches()) widest = std::max(widest, batch.size());
  EXPECT_EQ(widest, 2u);
}

// The fake backend with its drafts asked one stream per call (as a backend that cannot batch them would run them).
class OneStreamDrafts final : public Backend {
 public:
  explicit OneStreamDrafts(FakeBackend& inner) : inner_(inner) {}
  const BackendInfo& info() const override { return inner_.info(); }
  int64_t stream_bytes(int64_t rows) const override { return inner_.stream_bytes(rows); }
  Status open(StreamId stream, const StreamSpec& spec) override { return inner_.open(stream, spec); }
  Status prefill(std::span<const Piece> pieces) override { return inner_.prefill(pieces); }
  Status verify(std::span<const Window> windows, std::vector<std::vector<RowResult>>* out) override {
    return inner_.verify(windows, out);
  }
  Status keep(StreamId stream, int64_t rows) override { return inner_.keep(stream, rows); }
  Status draft(std::span<const DraftRequest> requests, std::vector<DraftProposal>* out) override {
    out->clear();
    for (const DraftRequest& r : requests) {
      std::vector<DraftProposal> one;
      Status st = inner_.draft({&r, 1}, &one);
      if (!st.ok()) return st;
      out->push_back(std::move(one[0]));
    }
    return Status();
  }
  StatusOr<std::vector<uint8_t>> snapshot(StreamId stream) override { return inner_.snapshot(stream); }
  Status restore(StreamId stream, std::span<const uint8_t> bytes, int64_t rows) override {
    return inner_.restore(stream, bytes, rows);
  }
  StatusOr<SnapshotParts> snapshot_parts(StreamId stream, int64_t from) override {
    return inner_.snapshot_parts(stream, from);
  }
  Status restore_parts(StreamId stream, std::span<const uint8_t> bounded, std::span<const RowChunks> tables,
                       int64_t rows) override {
    return inner_.restore_parts(stream, bounded, tables, rows);
  }
  void release(StreamId stream) override { inner_.release(stream); }

 private:
  FakeBackend& inner_;
};

// Concurrent drafting streams: each round's drafts reach the backend in one call (several streams in it), and
// the same requests with their drafts asked one stream per call give the same tokens, logprobs and draft counts —
// both equal to each request's serial reference (concurrent == solo).
TEST(LaneHost, RoundDraftsInOneCallEqualOneStreamPerCall) {
  FakeBackendOptions fo;
  fo.max_streams = 4;
  fo.max_verify_rows = 24;
  const int64_t lengths[] = {40, 3, 90, 17, 61, 8};
  auto request = [&](size_t i) {
    Request r = make_request(lengths[i], 700 + i, i % 2 == 1, 30);
    r.logprobs = true;
    return r;
  };
  struct Run {
    std::vector<testing::Outcome> outcomes;
    std::vector<FakeCall> calls;
  };
  auto run = [&](bool one_per_call) {
    FakeBackend fake(fo);
    OneStreamDrafts split(fake);
    Backend& backend = one_per_call ? static_cast<Backend&>(split) : static_cast<Backend&>(fake);
    LaneHost host(backend, LaneHostOptions{.max_batch_streams = 4, .prefill_rows = 32});
    auto sink = std::make_shared<Collector>();
    std::vector<RequestId> ids;
    for (size_t i = 0; i < std::size(lengths); ++i) {
      StatusOr<RequestId> id = host.submit(request(i), sink);
      EXPECT_TRUE(id.ok()) << id.status().to_string();
      ids.push_back(id.ok() ? *id : 0);
    }
    host.run_until_idle();
    Run out;
    for (RequestId id : ids) out.outcomes.push_back(sink->get(id));
    out.calls = fake.calls();
    EXPECT_EQ(fake.open_streams(), 0);
    return out;
  };
  const Run batched = run(false), split = run(true);
  FakeBackend reference(fo);
  int64_t drafted = 0;
  for (size_t i = 0; i < std::size(lengths); ++i) {
    const testing::Outcome &a = batched.outcomes[i], &b = split.outcomes[i];
    EXPECT_EQ(a.tokens, serial_reference(reference, request(i))) << "request " << i;
    EXPECT_EQ(b.tokens, a.tokens) << "request " << i;
    EXPECT_EQ(b.logprobs, a.logprobs) << "request " << i;
    EXPECT_EQ(b.finish.usage.drafted_tokens, a.finish.usage.drafted_tokens) << "request " << i;
    EXPECT_EQ(b.finish.usage.accepted_tokens, a.finish.usage.accepted_tokens) << "request " << i;
    EXPECT_EQ(a.finish_count, 1);
    drafted += a.finish.usage.drafted_tokens;
  }
  EXPECT_GT(drafted, 0);
  // Batched: at most one draft call between two verify calls, and some carried several streams. Split: one stream
  // per call.
  size_t widest = 0, since_verify = 0;
  for (const FakeCall& c : batched.calls) {
    if (c.kind == FakeCall::Kind::verify) since_verify = 0;
    if (c.kind != FakeCall::Kind::draft) continue;
    EXPECT_EQ(++since_verify, 1u) << "a round's drafts split over several calls";
    widest = std::max(widest, c.streams.size());
  }
  EXPECT_GE(widest, 2u);
  for (const FakeCall& c : split.calls)
    if (c.kind == FakeCall::Kind::draft) EXPECT_EQ(c.streams.size(), 1u);
}

TEST(LaneHost, CancelledStreamLeavesOthersUnchanged) {
  FakeBackendOptions fo;
  fo.max_streams = 3;
  Rig rig(fo, LaneHostOptions{.prefill_rows = 32});
  std::vector<Request> requests;
  for (uint64_t i = 0; i < 5; ++i) requests.push_back(make_request(20 + 40 * static_cast<int64_t>(i), 900 + i, i % 2, 40));
  for (auto& r : requests) r.ignore_eos = true;
  std::vector<RequestId> ids;
  for (const Request& r : requests) ids.push_back(rig.submit(r));
  for (int i = 0; i < 4; ++i) rig.host.step();
  rig.host.cancel(ids[1]);  // running (prefilling or decoding)
  rig.host.cancel(ids[4]);  // still queued (3 slots)
  rig.host.run_until_idle();
  for (size_t i : {0u, 2u, 3u}) EXPECT_EQ(rig.sink->get(ids[i]).tokens, serial_reference(rig.fake, requests[i]));
  for (size_t i : {1u, 4u}) {
    testing::Outcome o = rig.sink->get(ids[i]);
    EXPECT_EQ(o.finish.reason, FinishReason::cancelled);
    EXPECT_EQ(o.finish_count, 1);
    const std::vector<TokenId> full = serial_reference(rig.fake, requests[i]);
    ASSERT_LE(o.tokens.size(), full.size());
    EXPECT_TRUE(std::equal(o.tokens.begin(), o.tokens.end(), full.begin()));
  }
  EXPECT_TRUE(rig.sink->get(ids[4]).tokens.empty());
  EXPECT_EQ(rig.fake.open_streams(), 0);
}

TEST(LaneHost, ForcedTokensAreScoredNotSampled) {
  Rig rig;
  Request r = make_request(23, 31, true, 3);
  r.forced_tokens = {5, 6, 7};
  r.logprobs = true;
  r.top_logprobs = 3;
  const RequestId id = rig.submit(r);
  rig.host.run_until_idle();
  testing::Outcome o = rig.sink->get(id);
  ASSERT_EQ(o.tokens, (std::vector<TokenId>{5, 6, 7}));
  EXPECT_EQ(o.finish.reason, FinishReason::length);
  // Each forced token's logprob is log_softmax of the row before it, from the fake's chain.
  uint64_t h = FakeBackend::kFakeRoot;
  int64_t position = 0;
  for (TokenId t : r.prompt) h = FakeBackend::chain(h, position++, t);
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> row = rig.fake.logits(h);
    EXPECT_EQ(o.logprobs[i], token_logprob(row, r.forced_tokens[i]));
    EXPECT_TRUE(o.forced[i]);
    ASSERT_EQ(o.top[i].size(), 3u);
    EXPECT_EQ(o.top[i][0].token, sample_keyed(row, SamplingParams{}, 0, 0));  // best = greedy pick
    h = FakeBackend::chain(h, position++, r.forced_tokens[i]);
  }
  // A forced prefix then free generation equals the reference, drafted or not.
  for (bool draft : {false, true}) {
    Rig rig2;
    Request r2 = make_request(23, 31, true, 30, draft);
    r2.forced_tokens = {5, 6, 7, 8, 9};
    const RequestId id2 = rig2.submit(r2);
    rig2.host.run_until_idle();
    EXPECT_EQ(rig2.sink->get(id2).tokens, serial_reference(rig2.fake, r2));
  }
}

TEST(LaneHost, ThinkingBudgetForcesTheClose) {
  for (bool draft : {false, true}) {
    Rig rig;
    Request r = make_request(40, 77, false, 30, draft);
    r.ignore_eos = true;
    r.thinking = ThinkingBudget{6, 60, {59, 60}};
    const RequestId id = rig.submit(r);
    rig.host.run_until_idle();
    testing::Outcome o = rig.sink->get(id);
    const std::vector<TokenId> expected = serial_reference(rig.fake, r);
    EXPECT_EQ(o.tokens, expected);
    // Hand check of the rule: 60 does not come by itself early, so tokens 6 and 7 are the forced close.
    ASSERT_EQ(std::find(expected.begin(), expected.begin() + 6, 60), expected.begin() + 6);
    {
      EXPECT_EQ(o.tokens[6], 59);
      EXPECT_EQ(o.tokens[7], 60);
      EXPECT_TRUE(o.forced[6] && o.forced[7]);
    }
  }
}

TEST(LaneHost, StopSequencesAndStringsCutWhereTheyComplete) {
  auto token_bytes = [](TokenId t) { return "t" + std::to_string(t) + " "; };
  Request base = make_request(50, 4242, true, 40);
  base.ignore_eos = true;
  Rig probe;
  const std::vector<TokenId> full = serial_reference(probe.fake, base);
  ASSERT_EQ(full.size(), 40u);
  for (bool draft : {false, true}) {
    // A token sequence: output ends at its first completion.
    Rig rig;
    Request r = base;
    r.draft = draft;
    r.stop_sequences = {{full[12], full[13]}};
    const RequestId id = rig.submit(r);
    rig.host.run_until_idle();
    testing::Outcome o = rig.sink->get(id);
    EXPECT_EQ(o.tokens, serial_reference(rig.fake, r));
    EXPECT_EQ(o.finish.stop_kind, StopKind::sequence);
    EXPECT_LE(o.tokens.size(), 14u);

    // A string spanning two tokens: found by a plain search over the reference's bytes.
    Rig rig2(FakeBackendOptions{}, LaneHostOptions{.token_bytes = token_bytes});
    Request r2 = base;
    r2.draft = draft;
    // The last digit and space of token 20, then the start of token 21: completes at token 21 at the latest.
    const std::string b20 = token_bytes(full[20]);
    const std::string stop = b20.substr(b20.size() - 2) + "t" + std::to_string(full[21]).substr(0, 1);
    r2.stop_strings = {"never", stop};
    std::string bytes;
    size_t cut = full.size();
    for (size_t i = 0; i < full.size(); ++i) {
      bytes += token_bytes(full[i]);
      if (bytes.find(stop) != std::string::npos) {
        cut = i + 1;
        break;
      }
    }
    const RequestId id2 = rig2.submit(r2);
    rig2.host.run_until_idle();
    testing::Outcome o2 = rig2.sink->get(id2);
    EXPECT_EQ(o2.tokens, std::vector<TokenId>(full.begin(), full.begin() + static_cast<ptrdiff_t>(cut)));
    ASSERT_LE(cut, 22u);
    {
      EXPECT_EQ(o2.finish.stop_kind, StopKind::string);
      EXPECT_EQ(o2.finish.stop_index, 1);
      EXPECT_EQ(o2.finish.stop_byte_offset, static_cast<int64_t>(bytes.find(stop)));
    }
  }
}

TEST(LaneHost, LogprobsFollowTheCommittedTokensDraftedOrNot) {
  for (bool draft : {false, true}) {
    Rig rig;
    Request r = make_request(30, 61, true, 25, draft);
    r.ignore_eos = true;
    r.logprobs = true;
    r.top_logprobs = 4;
    const RequestId id = rig.submit(r);
    rig.host.run_until_idle();
    testing::Outcome o = rig.sink->get(id);
    ASSERT_EQ(o.tokens, serial_reference(rig.fake, r));
    if (draft) EXPECT_GT(o.finish.usage.accepted_tokens, 0);
    // Each token's logprob and alternatives come from the row that drew it, rebuilt from the fake's chain.
    uint64_t h = FakeBackend::kFakeRoot;
    int64_t position = 0;
    for (size_t i = 0; i + 1 < r.prompt.size(); ++i) h = FakeBackend::chain(h, position++, r.prompt[i]);
    TokenId feed = r.prompt.back();
    for (size_t i = 0; i < o.tokens.size(); ++i) {
      h = FakeBackend::chain(h, position++, feed);
      const std::vector<float> row = rig.fake.logits(h);
      EXPECT_EQ(o.logprobs[i], token_logprob(row, o.tokens[i])) << i;
      const std::vector<TokenLogprob> top = top_logprobs(row, 4);
      ASSERT_EQ(o.top[i].size(), 4u);
      for (size_t k = 0; k < 4; ++k) {
        EXPECT_EQ(o.top[i][k].token, top[k].token);
        EXPECT_EQ(o.top[i][k].logprob, top[k].logprob);
      }
      feed = o.tokens[i];
    }
  }
}

}  // namespace
}  // namespace dsv4::lanes
