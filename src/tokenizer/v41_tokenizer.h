// The DeepSeek-V4.1 tokenizer, embedded in the binary (src/tokenizer/data/PROVENANCE.md).
#pragma once

#include <string_view>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

// The embedded tokenizer.json bytes (decompressed on first use; valid for the process lifetime).
// What `dsv4 synth` writes into synthetic checkpoints.
std::string_view v41_tokenizer_json();

// The V4.1 tokenizer (parsed on first use; later calls return a cheap shared copy).
StatusOr<Tokenizer> load_v41_tokenizer();

}  // namespace dsv4
