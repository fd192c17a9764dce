// Status and Result<T>: the error tier for bad input (files, requests, arguments).
// Bugs use TERN_CHECK (check.h) instead. Library code never calls exit().
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "core/check.h"

namespace tern {

// An error message that names what was wrong: the field, where, expected vs found.
class Status {
 public:
  Status() = default;  // ok
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.message_ = std::move(message);
    s.failed_ = true;
    return s;
  }
  bool is_ok() const { return !failed_; }
  explicit operator bool() const { return !failed_; }
  const std::string& message() const { return message_; }

 private:
  std::string message_;
  bool failed_ = false;
};

inline Status error(std::string message) { return Status::error(std::move(message)); }

// Either a value or a failed Status. C++20 has no std::expected.
template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(implicit)
    TERN_CHECK(!std::get<Status>(v_).is_ok());
  }
  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    TERN_CHECK(!is_ok());
    return std::get<Status>(v_);
  }
  T& value() & {
    TERN_CHECK(is_ok());
    return std::get<T>(v_);
  }
  const T& value() const& {
    TERN_CHECK(is_ok());
    return std::get<T>(v_);
  }
  T&& value() && {
    TERN_CHECK(is_ok());
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tern

// Propagate a failed Status / Result from the current function.
#define TERN_RETURN_IF_ERROR(expr)              \
  do {                                          \
    ::tern::Status tern_status_ = (expr);       \
    if (!tern_status_.is_ok()) return tern_status_; \
  } while (0)

#define TERN_CONCAT_INNER(a, b) a##b
#define TERN_CONCAT(a, b) TERN_CONCAT_INNER(a, b)
// TERN_ASSIGN_OR_RETURN(auto x, make_x()); declares x from a Result or returns its Status.
#define TERN_ASSIGN_OR_RETURN(lhs, expr) TERN_ASSIGN_OR_RETURN_IMPL(TERN_CONCAT(tern_result_, __LINE__), lhs, expr)
#define TERN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.is_ok()) return tmp.status();           \
  lhs = std::move(tmp).value()
