// Builds a typed chat Conversation from an OpenAI /v1/chat/completions request body.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

#include "core/status.h"
#include "tokenizer/chat_types.h"

namespace dsv4::chat {

// Reads `messages`, `tools` and the thinking options of a request. The body must be parsed as
// nlohmann::ordered_json: tool schemas are rendered with their keys in request order.
//   messages[i]: role system|developer|user|assistant|tool; content string | null | array of
//     {"type":"text","text"} and {"type":"image_url","image_url":{"url"}} parts;
//     assistant: reasoning_content (or reasoning), tool_calls[{id, function{name, arguments}}] with arguments
//     a JSON string, an object, or null / missing / "" (no arguments: {});
//     tool: tool_call_id.
//   tools[i]: {"type":"function","function":{...}}.
//   thinking: chat_template_kwargs.thinking / enable_thinking (bool), or DeepSeek's
//     thinking {"type":"enabled"|"disabled"}; default on.
//   reasoning_effort (top level or chat_template_kwargs): none|minimal|low|medium|high|xhigh|max
//     or an integer 1..100; "none" turns thinking off.
//   chat_template_kwargs.drop_thinking, add_generation_prompt, continue_final_message (bool).
// Errors name the field: "messages[2].content: expected string or array of text parts".
StatusOr<Conversation> conversation_from_openai(const nlohmann::ordered_json& request,
                                                ChatFormat format);
StatusOr<Conversation> conversation_from_openai_text(std::string_view body, ChatFormat format);

}  // namespace dsv4::chat
