// V4.1 tokenizer speed: load, encode (warm word cache), decode, streaming detokenize, pre-tokenize.
#include <benchmark/benchmark.h>

#include <deque>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/detokenizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/v41_tokenizer.h"

namespace dsv4 {
namespace {

// About 70 KB of mixed prose, CJK, code and chat markup.
const std::string& sample_text() {
  static const std::string text = [] {
    const char* parts[] = {
        "The quick brown fox jumps over the lazy dog. It's 12345 o'clock, isn't it?\n",
        "我能吞下玻璃而不伤身体。今日は良い天気ですね。다람쥐 헌 쳇바퀴에 타고파.\n",
        "int main(int argc, char** argv) {\n  for (size_t i = 0; i < n; ++i) a[i] += b[i];\n  return 0;\n}\n",
        "<｜User｜>Summarise this, please.<｜Assistant｜><think>Fine.</think>Sure: ",
        "Съешь же ещё этих мягких французских булок, да выпей чаю. 😀🌍 naïve café\n\n",
    };
    std::string t;
    for (int i = 0; t.size() < 70000; ++i) t += parts[i % 5] + std::to_string(i) + " ";
    return t;
  }();
  return text;
}

const Tokenizer& v41() {
  static const Tokenizer t = *load_v41_tokenizer();
  return t;
}

void BM_V41Load(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(Tokenizer::from_json(v41_tokenizer_json()).ok());
}
BENCHMARK(BM_V41Load)->Unit(benchmark::kMillisecond);

void BM_V41Encode(benchmark::State& state) {
  std::vector<TokenId> ids = v41().encode(sample_text());  // loads, and warms the word cache
  for (auto _ : state) {
    ids.clear();
    v41().encode(sample_text(), ids);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(state.iterations() * sample_text().size());
  state.counters["tokens"] = static_cast<double>(ids.size());
}
BENCHMARK(BM_V41Encode)->Unit(benchmark::kMicrosecond);

// Mostly cold word cache: every iteration encodes 2,000 new random lowercase words (5-10 letters).
void BM_V41EncodeUnseenWords(benchmark::State& state) {
  v41();
  std::vector<TokenId> ids;
  uint64_t x = 88172645463325252ull;  // xorshift64 state
  int64_t bytes = 0;
  std::string text;
  for (auto _ : state) {
    state.PauseTiming();
    text.clear();
    for (int k = 0; k < 2000; ++k) {
      text += ' ';
      for (int len = 5 + static_cast<int>(x % 6), c = 0; c < len; ++c) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        text += static_cast<char>('a' + x % 26);
      }
    }
    state.ResumeTiming();
    ids.clear();
    v41().encode(text, ids);
    benchmark::DoNotOptimize(ids.data());
    bytes += static_cast<int64_t>(text.size());
  }
  state.SetBytesProcessed(bytes);
}
BENCHMARK(BM_V41EncodeUnseenWords)->Unit(benchmark::kMicrosecond);

void BM_V41Decode(benchmark::State& state) {
  std::vector<TokenId> ids = v41().encode(sample_text());
  for (auto _ : state) benchmark::DoNotOptimize(v41().decode(ids).ok());
  state.SetItemsProcessed(state.iterations() * ids.size());
}
BENCHMARK(BM_V41Decode)->Unit(benchmark::kMicrosecond);

void BM_V41DetokenizeStream(benchmark::State& state) {
  std::vector<TokenId> ids = v41().encode(sample_text());
  for (auto _ : state) {
    IncrementalDetokenizer d(v41());
    size_t bytes = 0;
    for (TokenId id : ids) bytes += d.push(id)->size();
    bytes += d.finish().size();
    benchmark::DoNotOptimize(bytes);
  }
  state.SetItemsProcessed(state.iterations() * ids.size());
}
BENCHMARK(BM_V41DetokenizeStream)->Unit(benchmark::kMicrosecond);

// Pre-tokenization alone: the hand-written DeepSeek matcher (arg 0) vs the three Oniguruma passes (1).
void BM_V41PreTokenize(benchmark::State& state) {
  auto root = nlohmann::json::parse(v41_tokenizer_json());
  PreTokenizer pre = *PreTokenizer::from_json(root["pre_tokenizer"], /*regex_only=*/state.range(0) == 1);
  std::vector<std::string_view> pieces;
  std::deque<std::string> storage;
  for (auto _ : state) {
    pre.split(sample_text(), pieces, storage);
    benchmark::DoNotOptimize(pieces.data());
  }
  state.SetBytesProcessed(state.iterations() * sample_text().size());
}
BENCHMARK(BM_V41PreTokenize)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dsv4

BENCHMARK_MAIN();
