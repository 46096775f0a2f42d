// Structured outputs: a request's response_format (and strict tool calls, tool_grammar.h) as a lane-core token
// constraint. The vocabulary's token trie is built once per model; compiled constraints are kept by their schema,
// so requests with the same schema share one mask cache.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "lanes/constraint.h"
#include "server/api_error.h"
#include "server/schema.h"
#include "server/text_side.h"
#include "structured/grammar_constraint.h"

namespace dsv4::server {

class ConstraintCache {
 public:
  static constexpr size_t kMaxEntries = 64;  // compiled constraints kept (least recently used dropped)

  // The constraint for `format` (null for text); a 400 naming the schema keyword it cannot hold to. `body` is the
  // request as sent: the schema is read from it with its properties in the order written.
  bool response_format(const TextSide& text, std::string_view body, ResponseFormat format,
                       std::shared_ptr<const lanes::TokenConstraint>& out, ApiError& err);

  // The tool-call constraint of a chat request offering tools, or null when its calls stay free: a forced call
  // (tool_choice required, or `named`: the prompt already holds the call's header line) holds every call of the
  // block; under tool_choice auto, strict tools or parallel_tool_calls false hold the block the reply may open.
  bool tool_calls(const TextSide& text, std::string_view body, const ParsedRequest& pr, bool forced,
                  const std::string& named, std::shared_ptr<const lanes::TokenConstraint>& out, ApiError& err);

  // A grammar built by `build` and kept under `key`; a 400 with `param` when building fails.
  bool constraint(const TextSide& text, const std::string& key, const char* param,
                  const std::function<StatusOr<structured::Grammar>()>& build,
                  std::shared_ptr<const lanes::TokenConstraint>& out, ApiError& err);

  // The model's tokens as bytes (special tokens excluded), built on first use.
  std::shared_ptr<const structured::Vocabulary> vocabulary(const TextSide& text);

 private:
  std::mutex mu_;
  std::mutex build_mu_;  // one vocabulary build at a time (requests arriving together wait for the first)
  const TextSide* vocab_of_ = nullptr;
  std::shared_ptr<const structured::Vocabulary> vocab_;
  std::map<std::string, std::shared_ptr<structured::GrammarConstraint>> kept_;
  std::deque<std::string> order_;  // least recently used first
};

}  // namespace dsv4::server
