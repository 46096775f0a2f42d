// Test driver for tokenizer_parity.mjs: encodes raw byte strings (framed on stdin) and prints ids
// and decoded text as JSON lines, then the encode time of the whole corpus.
//
// stdin: repeated [u32 little-endian length][bytes]. stdout: one {"ids":[...],"text":...,
// "text_skip":...} line per string, then {"strings":N,"bytes":B,"encode_ns":..,"encode_cpu_ns":..}
// (wall and thread CPU time, each the best of --repeat passes).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "tokenizer/v41_tokenizer.h"

int main(int argc, char** argv) {
  CLI::App app{"tokenizer parity driver"};
  std::string path;
  int repeat = 3;
  app.add_option("--tokenizer", path, "tokenizer.json (default: the embedded V4.1 tokenizer)");
  app.add_option("--repeat", repeat, "timed encode passes over the corpus (best is reported)");
  CLI11_PARSE(app, argc, argv);

  auto tok = path.empty() ? dsv4::load_v41_tokenizer() : dsv4::Tokenizer::from_json_file(path);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
    return 1;
  }
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  std::vector<std::string> corpus;
  size_t bytes = 0;
  for (size_t pos = 0; pos < input.size();) {
    if (pos + 4 > input.size()) { std::fprintf(stderr, "truncated frame header\n"); return 1; }
    uint32_t n = static_cast<uint8_t>(input[pos]) | static_cast<uint8_t>(input[pos + 1]) << 8 |
                 static_cast<uint8_t>(input[pos + 2]) << 16 | static_cast<uint32_t>(static_cast<uint8_t>(input[pos + 3])) << 24;
    pos += 4;
    if (pos + n > input.size()) { std::fprintf(stderr, "truncated frame\n"); return 1; }
    corpus.emplace_back(input.substr(pos, n));
    bytes += n;
    pos += n;
  }

  std::string out;
  for (const std::string& s : corpus) {
    std::vector<dsv4::TokenId> ids = tok->encode(s);
    auto text = tok->decode(ids);
    auto text_skip = tok->decode(ids, /*skip_special_tokens=*/true);
    if (!text.ok() || !text_skip.ok()) { std::fprintf(stderr, "decode failed\n"); return 1; }
    nlohmann::json line{{"ids", ids}, {"text", *text}, {"text_skip", *text_skip}};
    out += line.dump();
    out += '\n';
  }
  std::fwrite(out.data(), 1, out.size(), stdout);

  // Timing: a fresh tokenizer copy would share the cache, so passes after the first are warm —
  // the same holds for the JS side, which caches BPE results per pre-token too.
  // Wall time and this thread's CPU time (robust on a machine shared with other work).
  auto cpu_ns = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
  };
  int64_t best = INT64_MAX, best_cpu = INT64_MAX;
  std::vector<dsv4::TokenId> ids;
  for (int r = 0; r < repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    int64_t c0 = cpu_ns();
    for (const std::string& s : corpus) {
      ids.clear();
      tok->encode(s, ids);
    }
    best_cpu = std::min(best_cpu, cpu_ns() - c0);
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    best = std::min<int64_t>(best, ns);
  }
  std::printf("%s\n", nlohmann::json{{"strings", corpus.size()}, {"bytes", bytes}, {"encode_ns", best},
                                     {"encode_cpu_ns", best_cpu}}.dump().c_str());
  return 0;
}
