#include "core/status.hpp"

namespace sluice::core {

std::string_view code_name(Code code) {
  switch (code) {
    case Code::kOk:
      return "ok";
    case Code::kInvalidArgument:
      return "invalid argument";
    case Code::kNotFound:
      return "not found";
    case Code::kAlreadyExists:
      return "already exists";
    case Code::kFailedPrecondition:
      return "failed precondition";
    case Code::kTimeout:
      return "timeout";
    case Code::kUnavailable:
      return "unavailable";
    case Code::kProtocol:
      return "protocol error";
    case Code::kDataLoss:
      return "data loss";
    case Code::kResourceExhausted:
      return "resource exhausted";
    case Code::kCancelled:
      return "cancelled";
    case Code::kInternal:
      return "internal error";
    case Code::kPermissionDenied:
      return "permission denied";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  std::string out(code_name(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::with_context(std::string_view context) const {
  if (is_ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return {code_, std::move(m)};
}

}  // namespace sluice::core
