// Status / StatusOr: Strata's one error model for expected failures.
//
// A broken invariant is a STRATA_CHECK (abort with context, see check.h). An expected
// failure (bad request, corrupt file, missing tensor, peer unreachable) is a Status.
// Running out of pool memory is a typed outcome of the cache manager, not a Status.
// No exceptions cross module boundaries: third-party throws are caught at the edge and
// turned into a Status.
//
// Thread safety: values; safe to copy/move between threads.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace strata {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // caller gave bad input (malformed request, bad flag)
  kNotFound,          // file / tensor / model missing
  kDataLoss,          // corrupt or truncated file
  kFailedPrecondition,// mismatched config / checkpoint
  kOutOfRange,        // index or length past a limit (e.g. prompt longer than context)
  kUnimplemented,     // feature not supported (yet)
  kInternal,          // a bug or unexpected library failure
  kCancelled,         // request cancelled
  kUnavailable,       // transient: peer unreachable, shutting down
  kResourceExhausted, // a configured limit (body size, queue length) was hit
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "CODE: message" (or "OK").
  std::string to_string() const;
  // Prepends context: "context: message".
  Status with_context(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }

template <typename... Args>
Status invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status not_found(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kNotFound, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status data_loss(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kDataLoss, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status failed_precondition(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kFailedPrecondition, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status out_of_range(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kOutOfRange, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status unimplemented(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kUnimplemented, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status internal_error(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInternal, fmt::format(f, std::forward<Args>(args)...));
}

// StatusOr<T>: either a value or a non-OK Status. Accessing value() of an error aborts.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& s) : status_(s) { check_not_ok(); }  // NOLINT(implicit)
  StatusOr(Status&& s) : status_(std::move(s)) { check_not_ok(); }  // NOLINT(implicit)
  StatusOr(const T& v) : value_(v) {}  // NOLINT(implicit)
  StatusOr(T&& v) : value_(std::move(v)) {}  // NOLINT(implicit)

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { check_ok(); return *value_; }
  const T& value() const& { check_ok(); return *value_; }
  T&& value() && { check_ok(); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void check_not_ok() const {
    if (status_.ok()) {
      fmt::print(stderr, "StatusOr constructed from OK status\n");
      std::abort();
    }
  }
  void check_ok() const {
    if (!value_) {
      fmt::print(stderr, "StatusOr::value() on error: {}\n", status_.to_string());
      std::abort();
    }
  }
  Status status_;
  std::optional<T> value_;
};

}  // namespace strata

#define STRATA_CONCAT_INNER(a, b) a##b
#define STRATA_CONCAT(a, b) STRATA_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define STRATA_RETURN_IF_ERROR(expr)                  \
  do {                                                \
    ::strata::Status _st = (expr);                    \
    if (!_st.ok()) return _st;                        \
  } while (0)

// `STRATA_ASSIGN_OR_RETURN(auto x, f());` declares x from a StatusOr or returns its error.
#define STRATA_ASSIGN_OR_RETURN(lhs, expr)                                    \
  auto STRATA_CONCAT(_so_, __LINE__) = (expr);                                \
  if (!STRATA_CONCAT(_so_, __LINE__).ok()) return STRATA_CONCAT(_so_, __LINE__).status(); \
  lhs = std::move(STRATA_CONCAT(_so_, __LINE__)).value()
