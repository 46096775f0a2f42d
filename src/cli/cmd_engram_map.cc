// `dsv4 engram-map`: writes engram_token_map.json (raw id -> Engram compressed id) for a tokenizer.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "cli/command.h"
#include "tokenizer/engram_token_map.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/v41_tokenizer.h"

namespace dsv4::cli {
namespace {

int run_engram_map(int argc, char** argv) {
  CLI::App app{"Derive the Engram compressed token map of a tokenizer (NFKC, NFD, strip marks, "
               "lowercase, whitespace rules; first appearance wins) and write it as "
               "engram_token_map.json, which a checkpoint directory may carry instead of deriving "
               "it at load.",
               "dsv4 engram-map"};
  std::string tokenizer_path, out_path = std::string(kEngramTokenMapFile);
  int32_t pad_token_id = 2;
  int64_t expect = 0;
  app.add_option("--tokenizer", tokenizer_path,
                 "tokenizer.json to use (default: the embedded DeepSeek-V4.1 tokenizer)");
  app.add_option("--out", out_path, "output file, '-' for stdout (default: engram_token_map.json)");
  app.add_option("--pad-token-id", pad_token_id,
                 "raw id of the Engram pad token, the config's engram_pad_token_id (default 2)");
  app.add_option("--expect", expect,
                 "fail unless the map has this many compressed ids (the config's "
                 "engram_compressed_vocab_size, 99092 for V4.1)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto tok = tokenizer_path.empty() ? load_v41_tokenizer() : Tokenizer::from_json_file(tokenizer_path);
  if (!tok.ok()) {
    std::fprintf(stderr, "dsv4 engram-map: %s\n", tok.status().to_string().c_str());
    return 2;
  }
  auto map = build_engram_token_map(*tok, pad_token_id);
  if (!map.ok()) {
    std::fprintf(stderr, "dsv4 engram-map: %s\n", map.status().to_string().c_str());
    return 2;
  }
  std::fprintf(stderr, "dsv4 engram-map: %d raw ids -> %d compressed ids (pad id %d -> %d)\n",
               map->vocab_size, map->compressed_vocab_size, pad_token_id, map->pad_id);
  if (expect > 0 && map->compressed_vocab_size != expect) {
    std::fprintf(stderr, "dsv4 engram-map: expected %lld compressed ids; nothing written\n",
                 static_cast<long long>(expect));
    return 1;
  }
  if (out_path == "-") {
    std::cout << engram_token_map_to_json(*map);
    return std::cout.good() ? 0 : 1;
  }
  const Status s = write_engram_token_map_file(out_path, *map);
  if (!s.ok()) {
    std::fprintf(stderr, "dsv4 engram-map: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
DSV4_COMMAND("engram-map", "write engram_token_map.json (Engram compressed ids) for a tokenizer",
             run_engram_map);
}  // namespace dsv4::cli
