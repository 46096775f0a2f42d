// Status and StatusOr: how every fallible call in the engine reports an error (no exceptions inside).
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace dsv4 {

enum class StatusCode {
  ok,
  invalid_argument,   // bad input from a caller or a user
  not_found,          // a file, tensor or key that should exist does not
  data_loss,          // corrupt or truncated data (checkpoint, cache entry)
  out_of_range,       // a value or offset outside its valid range
  unimplemented,      // a supported-looking request this build cannot do
  resource_exhausted, // memory, slots or queue full
  unavailable,        // draining, halted or not ready
  cancelled,
  internal,           // a broken invariant: a bug in dsv4
};

const char* status_code_name(StatusCode code);

// A cheap success value or an error code with a human-readable message naming the problem.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  bool ok() const { return code_ == StatusCode::ok; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "data_loss: model-00001.safetensors: tensor 'embed.weight': offsets past end of file"
  std::string to_string() const;
  // Prefixes context to the message ("while loading X: ..."); a no-op on success.
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

inline Status ok_status() { return Status(); }

template <typename... Args>
Status error(StatusCode code, fmt::format_string<Args...> format, Args&&... args) {
  return Status(code, fmt::format(format, std::forward<Args>(args)...));
}

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}
  StatusOr(Status status) : status_(std::move(status)) {
    if (status_.ok()) status_ = Status(StatusCode::internal, "StatusOr built from an ok Status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace dsv4

#define DSV4_CONCAT_INNER(a, b) a##b
#define DSV4_CONCAT(a, b) DSV4_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` fails.
#define DSV4_RETURN_IF_ERROR(expr)                 \
  do {                                             \
    ::dsv4::Status dsv4_status_ = (expr);          \
    if (!dsv4_status_.ok()) return dsv4_status_;   \
  } while (0)

// `DSV4_ASSIGN_OR_RETURN(auto x, f());` binds the value or returns the error.
#define DSV4_ASSIGN_OR_RETURN(lhs, expr) \
  DSV4_ASSIGN_OR_RETURN_IMPL(DSV4_CONCAT(dsv4_statusor_, __LINE__), lhs, expr)
#define DSV4_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

// Aborts with file and line when an internal invariant is broken (never for user input).
#define DSV4_CHECK(cond)                                                               \
  do {                                                                                 \
    if (!(cond)) ::dsv4::check_failed(__FILE__, __LINE__, #cond);                      \
  } while (0)

namespace dsv4 {
[[noreturn]] void check_failed(const char* file, int line, const char* condition);
}  // namespace dsv4
