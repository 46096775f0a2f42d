// The server's text side for DeepSeek-V4 models: the embedded V4.1 tokenizer, the chat encoder
// (V4.1 or V4 grammar), the streaming detokenizer and the DSML/reasoning output parser.
#pragma once

#include "core/status.h"
#include "server/text_side.h"
#include "tokenizer/chat_types.h"

namespace dsv4::cli {

StatusOr<server::TextSide> make_v41_text_side(int32_t context_length, chat::ChatFormat format);

// The end-of-sequence token of the V4.1 tokenizer.
StatusOr<int32_t> v41_eos_id();

}  // namespace dsv4::cli
