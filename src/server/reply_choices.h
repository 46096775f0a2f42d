// The choices of one request (n, best_of): one Assembler per engine candidate, events routed by
// their choice index, streamed chunks tagged with it, one closing usage chunk and [DONE] after the
// last choice, and the whole reply's choices in index order. With best_of > n (never streamed) the
// reply holds the n candidates with the highest cumulative logprob of their generated tokens
// (ties: the lower candidate index), re-indexed 0..n-1. Usage counts the prompt once and the
// generated tokens of every candidate (best_of bills them all, as OpenAI did).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "server/assembler.h"

namespace dsv4::server {

class ReplyChoices {
 public:
  // `candidates` (>= n) assemblers, candidate i with setup.index = i.
  ReplyChoices(const AssemblerSetup& setup, const TextSide& text, int32_t n, int32_t candidates);

  int32_t candidates() const { return static_cast<int32_t>(choices_.size()); }
  Assembler& at(int32_t i) { return *choices_[static_cast<size_t>(i)]; }

  // Feeds an event to its candidate (an out-of-range index is dropped). Streamed: returns its SSE
  // chunks, and the candidate's closing chunk once it finished.
  std::string feed(const GenerationEvent& event);
  // Every candidate finished.
  bool finished() const;
  // Some candidate failed (engine error): the reply is an error.
  bool failed() const;
  Status error() const;  // the first failed candidate's

  // After finished(): the usage chunk (when asked for) and [DONE]; or the error event and [DONE].
  std::string finish_sse() const;
  nlohmann::json reply() const;  // the whole non-streamed reply
  Usage usage() const;
  std::string finish_reason() const;  // candidate 0's (metrics label the request by it)

  // The candidates returned, best first when ranked (best_of > n), else 0..n-1.
  std::vector<int32_t> returned() const;

 private:
  AssemblerSetup setup_;
  int32_t n_ = 1;
  std::vector<std::unique_ptr<Assembler>> choices_;
};

}  // namespace dsv4::server
