// OpenAI-shaped error bodies and the mapping from Status codes to HTTP statuses.
#include "server/api_error.h"

namespace dsv4::server {

nlohmann::json ApiError::to_json() const {
  nlohmann::json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return nlohmann::json{{"error", std::move(e)}};
}

ApiError bad_request(std::string param, std::string message, std::string code) {
  ApiError e;
  e.http_status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

ApiError error_from_status(const Status& status, std::string param) {
  ApiError e;
  e.message = status.message();
  e.param = std::move(param);
  switch (status.code()) {
    case StatusCode::invalid_argument:
    case StatusCode::out_of_range:
      e.http_status = 400;
      break;
    case StatusCode::not_found:
      e.http_status = 404;
      e.code = "not_found";
      break;
    case StatusCode::resource_exhausted:
      e.http_status = 429;
      e.type = "rate_limit_error";
      e.code = "queue_full";
      e.retry_after_s = 1;
      break;
    case StatusCode::unavailable:
      e.http_status = 503;
      e.type = "service_unavailable";
      e.code = "unavailable";
      e.retry_after_s = 5;
      break;
    case StatusCode::unimplemented:
      e.http_status = 400;
      e.code = "unsupported";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      e.code = "internal_error";
      break;
  }
  return e;
}

}  // namespace dsv4::server
