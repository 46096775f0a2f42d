// The choice count fields: `n` on both endpoints and `best_of` on completions, each in
// [1, SchemaLimits::max_n], best_of >= n. best_of > n ranks whole candidates, so it cannot stream
// (OpenAI refused it too). Scoring (forced_tokens, echo, prompt_logprobs) serves one choice: its
// forced part would be the same in every choice. See docs/server.md.
#include <fmt/format.h>

#include <limits>

#include "server/schema_fields.h"

namespace dsv4::server::fields {

bool validate_choices(Endpoint ep, const json& body, const SchemaLimits& limits, ParsedRequest& out,
                      ApiError& e) {
  const auto over = [&](const char* param, int64_t v) {
    return bad_request(param, fmt::format("'{}' is {}; this server serves at most {} choices per "
                                          "request",
                                          param, v, limits.max_n));
  };
  std::optional<int64_t> n, best_of;
  if (!read_int(body, "n", "n", 1, std::numeric_limits<int32_t>::max(), n, e) ||
      !read_int(body, "best_of", "best_of", 1, std::numeric_limits<int32_t>::max(), best_of, e))
    return false;
  if (n && *n > limits.max_n) return e = over("n", *n), false;
  out.n = static_cast<int32_t>(n.value_or(1));
  if (best_of && ep == Endpoint::chat) {
    // Not a chat field: 1 (a no-op) passes and is ignored.
    if (*best_of != 1)
      return e = bad_request("best_of", "'best_of' is served on /v1/completions only"), false;
    best_of.reset();
  }
  if (best_of && *best_of > limits.max_n) return e = over("best_of", *best_of), false;
  if (best_of && *best_of < out.n)
    return e = bad_request("best_of", fmt::format("'best_of' ({}) must be at least 'n' ({})",
                                                  *best_of, out.n)),
           false;
  out.best_of = static_cast<int32_t>(best_of.value_or(out.n));
  if (out.best_of > out.n && out.stream)
    return e = bad_request("best_of", "'best_of' above 'n' cannot be streamed (the best candidates "
                                      "are known only once all have finished); use 'stream': false"),
           false;
  if (out.best_of > 1 && (out.has_forced || out.echo || out.prompt_logprobs >= 0)) {
    const char* param = out.n > 1 ? "n" : "best_of";
    const char* with = out.has_forced ? "forced_tokens" : out.echo ? "echo" : "prompt_logprobs";
    return e = bad_request(param, fmt::format("'{}' above 1 is not served with '{}' (scoring "
                                              "serves one choice)",
                                              param, with)),
           false;
  }
  return true;
}

}  // namespace dsv4::server::fields
