// Status names, formatting and the abort path of DSV4_CHECK.
#include "core/status.h"

#include <cstdio>
#include <cstdlib>

namespace dsv4 {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::ok: return "ok";
    case StatusCode::invalid_argument: return "invalid_argument";
    case StatusCode::not_found: return "not_found";
    case StatusCode::data_loss: return "data_loss";
    case StatusCode::out_of_range: return "out_of_range";
    case StatusCode::unimplemented: return "unimplemented";
    case StatusCode::resource_exhausted: return "resource_exhausted";
    case StatusCode::unavailable: return "unavailable";
    case StatusCode::cancelled: return "cancelled";
    case StatusCode::internal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return fmt::format("{}: {}", status_code_name(code_), message_);
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, fmt::format("{}: {}", context, message_));
}

void check_failed(const char* file, int line, const char* condition) {
  std::fprintf(stderr, "dsv4: internal check failed at %s:%d: %s\n", file, line, condition);
  std::abort();
}

}  // namespace dsv4
