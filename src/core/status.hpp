// The one error currency of sluice: Status (a code and a message) and Result<T> (a value or a
// Status). Every API boundary returns one of them; both are [[nodiscard]].
//
// Thread safety: plain values; safe to copy and move between threads.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace sluice::core {

enum class Code : int {
  kOk = 0,
  kInvalidArgument,  // the caller's input is wrong: bad config, bad manifest, bad flag
  kNotFound,         // the thing asked for does not exist (yet)
  kAlreadyExists,
  kFailedPrecondition,  // the state does not allow this now
  kTimeout,             // a wait ran out of time
  kUnavailable,         // a peer or transport cannot be reached; retrying elsewhere may work
  kProtocol,            // a message or descriptor is malformed, of another version, or oversized
  kDataLoss,            // bytes arrived but are wrong (checksum mismatch, torn version)
  kResourceExhausted,
  kCancelled,  // orderly shutdown or caller cancelled
  kInternal,   // a bug or an unexpected library failure
  // An authenticated peer asked for what its role or identity may not do (the last code: a
  // peer's error reply with a higher code is read as internal).
  kPermissionDenied,
};

// The lowercase name of a code, as it appears in messages ("timeout", "protocol", ...).
std::string_view code_name(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool is_ok() const { return code_ == Code::kOk; }
  explicit operator bool() const { return is_ok(); }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "timeout: request 'ping' to tcp://127.0.0.1:5555 timed out after 200 ms"
  std::string to_string() const;

  // Returns a copy whose message is "context: <old message>"; callers add context, they do not
  // log the error a second time.
  Status with_context(std::string_view context) const;

  // Marks the status as looked at when the caller deliberately drops it.
  void ignore() const {}

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) {
  return {Code::kInvalidArgument, std::move(m)};
}
inline Status not_found(std::string m) {
  return {Code::kNotFound, std::move(m)};
}
inline Status failed_precondition(std::string m) {
  return {Code::kFailedPrecondition, std::move(m)};
}
inline Status timeout_error(std::string m) {
  return {Code::kTimeout, std::move(m)};
}
inline Status unavailable(std::string m) {
  return {Code::kUnavailable, std::move(m)};
}
inline Status protocol_error(std::string m) {
  return {Code::kProtocol, std::move(m)};
}
inline Status data_loss(std::string m) {
  return {Code::kDataLoss, std::move(m)};
}
inline Status cancelled(std::string m) {
  return {Code::kCancelled, std::move(m)};
}
inline Status permission_denied(std::string m) {
  return {Code::kPermissionDenied, std::move(m)};
}
inline Status internal_error(std::string m) {
  return {Code::kInternal, std::move(m)};
}

// A value or an error Status (never an ok Status).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design, like std::expected
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).is_ok()) {
      v_ = Status(Code::kInternal, "Result constructed from an ok Status without a value");
    }
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }

  // The error; an ok Status when a value is held.
  Status status() const { return is_ok() ? Status() : std::get<Status>(v_); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  T value_or(T fallback) const& { return is_ok() ? std::get<T>(v_) : std::move(fallback); }

  // Marks the result as looked at when the caller deliberately drops it.
  void ignore() const {}

 private:
  std::variant<T, Status> v_;
};

namespace detail {
inline Status to_status(Status s) {
  return s;
}
template <typename T>
Status to_status(const Result<T>& r) {
  return r.status();
}
}  // namespace detail

}  // namespace sluice::core

#define SLUICE_CONCAT_INNER_(a, b) a##b
#define SLUICE_CONCAT_(a, b) SLUICE_CONCAT_INNER_(a, b)

// Returns the error of a Status or Result expression from the enclosing function.
#define SLUICE_TRY(expr)                                                 \
  do {                                                                   \
    auto sluice_try_status_ = ::sluice::core::detail::to_status((expr)); \
    if (!sluice_try_status_.is_ok()) return sluice_try_status_;          \
  } while (0)

// SLUICE_ASSIGN_OR_RETURN(auto x, make_x()); declares x from a Result or returns its error.
#define SLUICE_ASSIGN_OR_RETURN(lhs, expr) \
  SLUICE_ASSIGN_OR_RETURN_IMPL_(SLUICE_CONCAT_(sluice_result_, __LINE__), lhs, expr)
#define SLUICE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.is_ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
