#include "wire/deadline.hpp"

#include <limits>

namespace sluice::core {

namespace {

// a + b for a, b >= 0, at most INT64_MAX.
std::int64_t add_saturating(std::int64_t a, std::int64_t b) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  return a > kMax - b ? kMax : a + b;
}

}  // namespace

// Only differences of two non-negative numbers are taken (always in range), and a sum only
// saturating: a peer's INT64_MAX deadline or time-out is a number like any other.
DeadlineCheck check_deadline(const ArrivedRequest& r, std::int64_t slack_ms) {
  if (r.now_ms <= r.deadline_ms) {
    const std::int64_t left = r.deadline_ms - r.now_ms;
    // Sent at (deadline - timeout) by the sender's clock, and no later than now by this one's.
    if (r.timeout_ms > 0 && left > r.timeout_ms && left - r.timeout_ms > slack_ms)
      return {DeadlineVerdict::kClockAhead, left - r.timeout_ms};
    return {};
  }
  const std::int64_t late = r.now_ms - r.deadline_ms;
  if (late <= slack_ms) return {};
  if (late > r.waited_at_most_ms && late - r.waited_at_most_ms > slack_ms) {
    // It reached this server no earlier than waited_at_most_ms ago, and its sender's clock said
    // (deadline - timeout) when it sent it: behind by (late - waited + timeout), had it taken no
    // time on the way.
    return {DeadlineVerdict::kClockBehind,
            add_saturating(late - r.waited_at_most_ms, r.timeout_ms)};
  }
  return {DeadlineVerdict::kExpired, 0};
}

}  // namespace sluice::core
