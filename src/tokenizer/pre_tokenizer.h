// tokenizer.json "pre_tokenizer": Split (regex or string, all five behaviors) and ByteLevel.
#pragma once

#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "tokenizer/regex.h"

namespace dsv4 {

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

class PreTokenizer {
 public:
  // Accepts null, Sequence, Split and ByteLevel; ByteLevel must come last (its byte mapping is done
  // by the BPE model on raw bytes). Other types are refused by name. The DeepSeek split sequence
  // runs on deepseek_split() unless `regex_only` (kept for differential tests).
  static StatusOr<PreTokenizer> from_json(const nlohmann::json& j, bool regex_only = false);

  // Splits `text` (valid UTF-8) into pieces. Pieces point into `text`, or into `storage` when a
  // prefix space had to be added. Empty pieces are dropped.
  void split(std::string_view text, std::vector<std::string_view>& pieces,
             std::deque<std::string>& storage) const;

  // True when the pipeline ends in ByteLevel (required by the BPE model).
  bool byte_level() const { return byte_level_; }
  // True when split() uses the hand-written DeepSeek matcher instead of the regexes.
  bool uses_deepseek_matcher() const { return deepseek_; }

 private:
  struct SplitStep {
    Regex regex;
    std::string source;  // the Regex pattern as written ("" for String patterns)
    bool empty_pattern = false;  // a String pattern "" never matches
    SplitBehavior behavior = SplitBehavior::isolated;
    bool invert = false;
  };
  std::vector<SplitStep> steps_;
  bool byte_level_ = false;
  bool deepseek_ = false;
  bool add_prefix_space_ = false;
  bool byte_level_regex_ = false;  // ByteLevel.use_regex: the GPT-2 split, isolated
  SplitStep gpt2_;
};

}  // namespace dsv4
