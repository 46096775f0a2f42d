// Constrained decoding's host cost on the V4.1 vocabulary (129,280 tokens): the token trie, a cold mask (a trie walk)
// at typical JSON positions, and the per-step cost a constraint adds to a batch of rows — cursor clone, cached mask,
// and the masked keyed draw against the plain one. Results go to docs/perf.md beside a decode step of the same card.
#include <benchmark/benchmark.h>

#include <random>

#include "lanes/sampling.h"
#include "lanes/token_mask.h"
#include "structured/grammar_constraint.h"
#include "structured/json_schema.h"
#include "tokenizer/v41_tokenizer.h"

namespace dsv4 {
namespace {

using structured::GrammarConstraint;
using structured::MatchState;

std::shared_ptr<const structured::Vocabulary> build_vocab() {
  static const Tokenizer tok = *load_v41_tokenizer();
  std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
  std::vector<bool> usable(bytes.size());
  for (size_t id = 0; id < bytes.size(); ++id) {
    const TokenId t = static_cast<TokenId>(id);
    if (tok.is_special(t)) continue;
    if (auto b = tok.token_bytes(t)) bytes[id] = std::string(*b);
    usable[id] = !bytes[id].empty();
  }
  return std::make_shared<const structured::Vocabulary>(std::move(bytes), std::move(usable));
}

const std::shared_ptr<const structured::Vocabulary>& vocab() {
  static const auto v = build_vocab();
  return v;
}

const char* kSchema = R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
  "tags":{"type":"array","items":{"type":"string"}}},"required":["name","age","tags"]})";

std::shared_ptr<GrammarConstraint> constraint() {
  static const auto c = std::make_shared<GrammarConstraint>(
      vocab(), *structured::json_schema_grammar(nlohmann::ordered_json::parse(kSchema)));
  return c;
}

// Positions inside the schema's output, by the text written so far.
const char* kPrefixes[] = {"", "{", "{\"name\":\"", "{\"name\":\"Ann\",\"age\":", "{\"name\":\"Ann\",\"age\":3,\"tags\":["};
const char* kNames[] = {"start", "key", "in string", "number", "array item"};

void BM_Vocabulary(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(build_vocab());
}
BENCHMARK(BM_Vocabulary)->Unit(benchmark::kMillisecond);

void BM_ColdMask(benchmark::State& state) {
  const auto c = constraint();
  MatchState s;
  c->matcher().start(s);
  c->matcher().feed(s, kPrefixes[state.range(0)]);
  int64_t allowed = 0;
  for (auto _ : state) allowed = c->build(s)->count();
  state.SetLabel(std::string(kNames[state.range(0)]) + ", " + std::to_string(allowed) + " tokens allowed");
}
BENCHMARK(BM_ColdMask)->DenseRange(0, 4)->Unit(benchmark::kMillisecond);

// One step of `rows` rows: each row's draw, plain (range(1) = 0) or constrained at a cached position (1: the cursor
// cloned, its mask looked up, the masked draw). Sampled at temperature 0.7 (greedy: range(2) = 1).
void BM_StepDraws(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0));
  const bool constrained = state.range(1) != 0;
  const lanes::SamplingParams params{state.range(2) != 0 ? 0.0f : 0.7f, 0, 1.0f, 0.0f};
  const int32_t V = vocab()->size();
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<std::vector<float>> logits(static_cast<size_t>(rows), std::vector<float>(static_cast<size_t>(V)));
  for (auto& row : logits) {
    for (float& x : row) x = normal(rng);
  }
  auto cursor = constraint()->start();
  for (char ch : std::string(kPrefixes[2])) (void)ch;
  structured::MatchState s;
  const auto c = constraint();
  c->matcher().start(s);
  c->matcher().feed(s, kPrefixes[2]);  // inside a free string: the widest mask
  (void)c->mask(s);                    // cached from here on
  int64_t position = 100;
  for (auto _ : state) {
    for (int r = 0; r < rows; ++r) {
      const std::vector<float>& row = logits[static_cast<size_t>(r)];
      if (constrained) {
        auto copy = cursor->clone();
        std::shared_ptr<const lanes::TokenMask> m = c->mask(s);
        benchmark::DoNotOptimize(lanes::draw_masked(row, params, 7, position, *m));
        benchmark::DoNotOptimize(copy.get());
      } else {
        benchmark::DoNotOptimize(lanes::sample_keyed(row, params, 7, position));
      }
    }
    ++position;
  }
  state.SetLabel(std::string(constrained ? "constrained" : "plain") + (state.range(2) ? ", greedy" : ", T 0.7"));
}
BENCHMARK(BM_StepDraws)
    ->ArgsProduct({{1, 64}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dsv4

BENCHMARK_MAIN();
