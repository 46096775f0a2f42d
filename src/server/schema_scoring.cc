// Prompt scoring fields: `echo` on completions (the reply starts with the prompt, its tokens'
// logprobs included), vLLM's `prompt_logprobs` on both endpoints, and `max_tokens: 0`, which only
// an echo may ask for (the reply is then the prompt alone). See docs/server.md.
#include <fmt/format.h>

#include "server/schema_fields.h"

namespace dsv4::server::fields {

bool validate_scoring(Endpoint ep, const json& body, const SchemaLimits& limits, ParsedRequest& out,
                      ApiError& e) {
  if (ep == Endpoint::completions) {
    std::optional<bool> echo;
    if (!read_bool(body, "echo", "echo", echo, e)) return false;
    out.echo = echo.value_or(false);
  }
  std::optional<int64_t> prompt_logprobs;
  if (!read_int(body, "prompt_logprobs", "prompt_logprobs", 0, limits.max_top_logprobs,
                prompt_logprobs, e))
    return false;
  if (prompt_logprobs) {
    if (out.stream)
      return e = bad_request("prompt_logprobs",
                             "'prompt_logprobs' is not available when streaming; use 'echo' with "
                             "'logprobs' on /v1/completions, or 'stream': false"),
             false;
    out.prompt_logprobs = static_cast<int32_t>(*prompt_logprobs);
  }
  if (out.max_tokens && *out.max_tokens == 0 && !out.echo) {
    const char* param = field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    return e = bad_request(param, fmt::format("'{}' must be at least 1 (0 is allowed only with "
                                              "'echo': true on /v1/completions)",
                                              param)),
           false;
  }
  return true;
}

}  // namespace dsv4::server::fields
