// The lane adapter's host side of a decode step on a forward that costs nothing, on rows of the V4 vocabulary
// (129,280 logits): whole rows drawn per kind (greedy, keyed, top-p, logprobs) on 1..n draw threads, and rows reduced
// where the logits are (argmax id, Gumbel candidates) as the CUDA forward returns them. What a round costs per
// decoding stream on the host, apart from the forward and the copies.
#include <benchmark/benchmark.h>

#include <random>

#include "engine/lane_backend.h"
#include "family/deepseek_v41/preset.h"

namespace dsv4 {
namespace {

// A forward with fixed logits rows (the same for every call) that holds no state: forward_viewed views them in place.
class StubForward final : public engine::StreamForward {
 public:
  StubForward() : plan_(family::build_plan(family::preset_config(family::Preset::tiny, family::Variant::v41))) {
    const size_t V = static_cast<size_t>(plan_.vocab);
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    rows_.resize(kRows * V);
    for (float& x : rows_) x = normal(rng);
  }
  const family::ModelPlan& config() const override { return plan_; }
  bool has_drafter() const override { return false; }
  uint32_t snapshot_version() const override { return 1; }
  StatusOr<int32_t> open_stream() override {
    lengths_.push_back(0);
    return static_cast<int32_t>(lengths_.size() - 1);
  }
  Status close_stream(int32_t) override { return ok_status(); }
  StatusOr<int64_t> length(int32_t s) const override { return lengths_[static_cast<size_t>(s)]; }
  StatusOr<std::vector<engine::PieceResult>> forward(const std::vector<engine::Piece>& pieces) override {
    std::vector<engine::PieceResult> out(pieces.size());
    std::vector<std::span<const float>> views;
    DSV4_RETURN_IF_ERROR(forward_viewed(pieces, &out, &views));
    for (size_t i = 0; i < out.size(); ++i) out[i].logits.assign(views[i].begin(), views[i].end());
    return out;
  }
  Status forward_viewed(const std::vector<engine::Piece>& pieces, std::vector<engine::PieceResult>* out,
                        std::vector<std::span<const float>>* views) override {
    const size_t V = static_cast<size_t>(plan_.vocab);
    out->assign(pieces.size(), {});
    views->clear();
    size_t at = 0;
    for (size_t p = 0; p < pieces.size(); ++p) {
      lengths_[static_cast<size_t>(pieces[p].stream)] += static_cast<int64_t>(pieces[p].tokens.size());
      const size_t k = pieces[p].logit_rows.size();
      views->emplace_back(rows_.data() + (at % kRows) * V, k * V);  // k <= kRows - at % kRows by the bench's shapes
      at += k;
      if (!reduced_ || pieces[p].draws.empty()) continue;
      (*out)[p].picks.assign(k, engine::RowPick{});
      for (engine::RowPick& pick : (*out)[p].picks) {  // a pick as a device returns it: an id, or one candidate
        pick.whole = false;
        pick.token = 7;
        pick.ids = {7};
        pick.logits = {rows_[7]};
      }
      (*views)[p] = {};
    }
    return ok_status();
  }
  Status truncate(int32_t s, int64_t n) override {
    lengths_[static_cast<size_t>(s)] = n;
    return ok_status();
  }
  StatusOr<std::vector<uint8_t>> snapshot(int32_t) const override { return std::vector<uint8_t>{}; }
  Status restore(int32_t, const std::vector<uint8_t>&) override { return ok_status(); }
  StatusOr<engine::DraftResult> draft(int32_t, int32_t) override { return engine::DraftResult{}; }
  void set_reduced(bool on) { reduced_ = on; }

 private:
  static constexpr size_t kRows = 64;
  family::ModelPlan plan_;
  std::vector<float> rows_;  // f32 [kRows, V]
  std::vector<int64_t> lengths_;
  bool reduced_ = false;
};

enum Kind { greedy, keyed, top_p, logprobs, greedy_reduced, keyed_reduced };

// Args: decoding streams (one row each), kind, draw threads. One iteration = one step's draws; wall time, and per_stream_s
// the wall time per stream.
void BM_LaneDraws(benchmark::State& state) {
  const int32_t streams = static_cast<int32_t>(state.range(0));
  const Kind kind = static_cast<Kind>(state.range(1));
  auto forward = std::make_unique<StubForward>();
  forward->set_reduced(kind == greedy_reduced || kind == keyed_reduced);
  engine::LaneBackendOptions o;
  o.model_id = "stub";
  o.max_streams = streams;
  o.draw_threads = static_cast<int32_t>(state.range(2));
  auto made = engine::LaneBackend::create(std::move(forward), 16, o);
  if (!made.ok()) return state.SkipWithError(made.status().to_string().c_str());
  engine::LaneBackend& b = **made;
  lanes::StreamSpec spec;
  spec.sampling.temperature = kind == greedy || kind == greedy_reduced || kind == logprobs ? 0.0f : 0.8f;
  spec.sampling.top_p = kind == top_p ? 0.95f : 1.0f;
  spec.max_rows = 1 << 30;
  std::vector<lanes::Window> windows;
  for (int32_t s = 0; s < streams; ++s) {
    (void)b.open(static_cast<lanes::StreamId>(s + 1), spec);
    windows.push_back(lanes::Window{static_cast<lanes::StreamId>(s + 1), 0, {1}, kind == logprobs, kind == logprobs ? 5 : 0});
  }
  std::vector<std::vector<lanes::RowResult>> out;
  for (auto _ : state) {
    if (Status st = b.verify(windows, &out); !st.ok()) return state.SkipWithError(st.to_string().c_str());
    for (int32_t s = 0; s < streams; ++s) {
      (void)b.keep(static_cast<lanes::StreamId>(s + 1), windows[static_cast<size_t>(s)].start);
    }
    benchmark::DoNotOptimize(out);
  }
  state.counters["per_stream_s"] =
      benchmark::Counter(static_cast<double>(streams), benchmark::Counter::kIsIterationInvariantRate |
                                                           benchmark::Counter::kInvert);
}

BENCHMARK(BM_LaneDraws)
    ->ArgNames({"streams", "kind", "threads"})
    ->ArgsProduct({{16}, {greedy, keyed, top_p, logprobs}, {1, 2, 4}})
    ->Args({16, greedy_reduced, 4})
    ->Args({16, keyed_reduced, 4})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dsv4

BENCHMARK_MAIN();
