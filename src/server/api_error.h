// OpenAI-shaped errors: {"error": {"message", "type", "param", "code"}} with an HTTP status.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/status.h"

namespace dsv4::server {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null; names the offending field, e.g. "messages[2].content"
  std::string code;   // "" -> null
  int retry_after_s = 0;  // > 0: sent as Retry-After

  nlohmann::json to_json() const;
  std::string body() const { return to_json().dump(); }
};

// 400 invalid_request_error naming `param`.
ApiError bad_request(std::string param, std::string message, std::string code = "");
// Maps an engine or text-side Status to an HTTP error (invalid_argument -> 400, unavailable -> 503,
// resource_exhausted -> 429, others -> 500).
ApiError error_from_status(const Status& status, std::string param = "");

}  // namespace dsv4::server
