// `dsv4 tokenize`: JSON strings on stdin -> token id arrays on stdout, one per line (or back).
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/v41_tokenizer.h"

namespace dsv4::cli {
namespace {

using nlohmann::json;

// One input line -> one output line, or an error message naming what is wrong with it.
StatusOr<std::string> encode_line(const Tokenizer& tok, const std::string& line) {
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return error(StatusCode::invalid_argument, "not valid JSON (expected a JSON string)");
  if (!j.is_string()) return error(StatusCode::invalid_argument, "expected a JSON string, got {}", j.type_name());
  return json(tok.encode(j.get_ref<const std::string&>())).dump();
}

StatusOr<std::string> decode_line(const Tokenizer& tok, const std::string& line, bool skip_special) {
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return error(StatusCode::invalid_argument, "not valid JSON (expected an array of ids)");
  if (!j.is_array()) return error(StatusCode::invalid_argument, "expected an array of ids, got {}", j.type_name());
  std::vector<TokenId> ids;
  ids.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number_integer() || j[i].get<int64_t>() < 0 || j[i].get<int64_t>() > INT32_MAX)
      return error(StatusCode::invalid_argument, "element {} ({}) is not a token id", i, j[i].dump());
    ids.push_back(static_cast<TokenId>(j[i].get<int64_t>()));
  }
  DSV4_ASSIGN_OR_RETURN(std::string text, tok.decode(ids, skip_special));
  return json(text).dump();
}

int run_tokenize(int argc, char** argv) {
  CLI::App app{"Tokenize text: each stdin line is a JSON string; each stdout line is the JSON array of its "
               "token ids. A bad line is reported on stderr (with its line number) and answered with null; "
               "the exit status is then 1.",
               "dsv4 tokenize"};
  std::string path;
  bool decode = false, skip_special = false;
  app.add_option("--tokenizer", path, "tokenizer.json to use (default: the embedded DeepSeek-V4.1 tokenizer)");
  app.add_flag("--decode", decode, "the reverse: each line is a JSON array of ids; prints the decoded text as a JSON string");
  app.add_flag("--skip-special-tokens", skip_special, "with --decode: leave out tokens marked special (BOS, EOS, ...)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  auto tok = path.empty() ? load_v41_tokenizer() : Tokenizer::from_json_file(path);
  if (!tok.ok()) {
    std::fprintf(stderr, "dsv4 tokenize: %s\n", tok.status().to_string().c_str());
    return 2;
  }
  const bool interactive = isatty(STDOUT_FILENO);
  std::string line;
  size_t line_no = 0, bad = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    auto out = decode ? decode_line(*tok, line, skip_special) : encode_line(*tok, line);
    if (out.ok()) {
      std::fwrite(out->data(), 1, out->size(), stdout);
      std::fputc('\n', stdout);
    } else {
      ++bad;
      std::fputs("null\n", stdout);
      std::fprintf(stderr, "dsv4 tokenize: line %zu: %s\n", line_no, out.status().message().c_str());
    }
    if (interactive) std::fflush(stdout);
  }
  std::fflush(stdout);
  if (bad > 0) {
    std::fprintf(stderr, "dsv4 tokenize: %zu of %zu lines failed\n", bad, line_no);
    return 1;
  }
  return 0;
}

}  // namespace

DSV4_COMMAND("tokenize", "text <-> token ids, one JSON value per line", run_tokenize);

}  // namespace dsv4::cli
