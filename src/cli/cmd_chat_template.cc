// `dsv4 chat-template`: renders an OpenAI chat request into the prompt text, or parses a reply.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "tokenizer/chat_openai.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/dsml_parser.h"

namespace dsv4::cli {
namespace {

int run_chat_template(int argc, char** argv) {
  CLI::App app{"Render a /v1/chat/completions request body (JSON on stdin) into the model's prompt "
               "text on stdout, exactly as the chat encoder does; or, with --parse, turn generated "
               "reply text on stdin into an OpenAI message (content, reasoning_content, tool_calls).",
               "dsv4 chat-template"};
  std::string format = "v41";
  bool parse = false, reasoning = false;
  app.add_option("--format", format, "prompt grammar: v41 (V4.1-Flash) or v4 (V4-Flash / 0731)")
      ->check(CLI::IsMember({"v41", "v4"}));
  app.add_flag("--parse", parse, "parse a generated reply instead of rendering a request");
  app.add_flag("--reasoning", reasoning,
               "with --parse: the reply starts inside <think> (the prompt ended with <think>)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const chat::ChatFormat fmt = format == "v4" ? chat::ChatFormat::v4 : chat::ChatFormat::v41;
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (parse) {
    chat::ParserOptions o;
    o.format = fmt;
    o.starts_in_reasoning = reasoning;
    const chat::ParsedMessage m = chat::parse_completion(input, o);
    nlohmann::ordered_json j = {{"role", "assistant"}, {"content", m.content}};
    if (!m.reasoning_content.empty()) j["reasoning_content"] = m.reasoning_content;
    if (!m.tool_calls.empty()) {
      j["tool_calls"] = nlohmann::ordered_json::array();
      for (const auto& c : m.tool_calls)
        j["tool_calls"].push_back({{"id", c.id}, {"type", "function"},
                                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  auto conv = chat::conversation_from_openai_text(input, fmt);
  if (!conv.ok()) {
    std::fprintf(stderr, "dsv4 chat-template: %s\n", conv.status().to_string().c_str());
    return 1;
  }
  auto prompt = chat::render_conversation(*conv);
  if (!prompt.ok()) {
    std::fprintf(stderr, "dsv4 chat-template: %s\n", prompt.status().to_string().c_str());
    return 1;
  }
  std::cout << prompt->text;
  return std::cout.good() ? 0 : 1;
}

}  // namespace
DSV4_COMMAND("chat-template", "render an OpenAI chat request into prompt text (or parse a reply)",
             run_chat_template);
}  // namespace dsv4::cli
