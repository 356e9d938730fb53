// A server's decision on a request's deadline (wire/deadline.hpp), with the clocks given: in
// time, expired, a sender whose clock is behind or ahead, and the extreme values a peer may send.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>

#include "wire/deadline.hpp"

using namespace sluice::core;

namespace {

constexpr std::int64_t kSlack = 250;
constexpr std::int64_t kNow = 1'800'000'000'000;  // a wall clock in 2027, in ms
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

DeadlineCheck check(std::int64_t deadline, std::int64_t timeout, std::int64_t waited,
                    std::int64_t now = kNow) {
  return check_deadline(ArrivedRequest{now, deadline, timeout, waited}, kSlack);
}

}  // namespace

TEST_SUITE("core.deadline") {
  TEST_CASE("a request in time, or late within the slack, is served") {
    CHECK(check(kNow + 375, 375, 0).verdict == DeadlineVerdict::kServe);
    CHECK(check(kNow, 375, 0).verdict == DeadlineVerdict::kServe);
    CHECK(check(kNow - kSlack, 375, 0).verdict == DeadlineVerdict::kServe);
    // An older sender states no time-out: only its deadline counts.
    CHECK(check(kNow + 3'600'000, 0, 0).verdict == DeadlineVerdict::kServe);
  }

  TEST_CASE("a request late by no more than it can have waited here expired: dropped") {
    // The server was stopped for 3 s; a report with a 375 ms time-out sent at its start.
    DeadlineCheck c = check(kNow - 3000 + 375, 375, 3000);
    CHECK(c.verdict == DeadlineVerdict::kExpired);
    CHECK(c.skew_ms == 0);
    // Late by exactly what it can have waited plus the slack: still a wait, not a clock.
    CHECK(check(kNow - 1250, 375, 1000).verdict == DeadlineVerdict::kExpired);
  }

  TEST_CASE("a request later than it can have waited here comes from a clock behind: served") {
    // The sender's clock is 10 s behind; the server read the request within 20 ms of arrival.
    DeadlineCheck c = check(kNow - 10'000 + 375, 375, 20);
    CHECK(c.verdict == DeadlineVerdict::kClockBehind);
    CHECK(c.skew_ms == 10'000 - 20);  // at least, had it taken no time on the way
    // Behind by an hour, with a backlog of 2 s here.
    c = check(kNow - 3'600'000, 375, 2000);
    CHECK(c.verdict == DeadlineVerdict::kClockBehind);
    CHECK(c.skew_ms == 3'600'000 - 2000 + 375);
  }

  TEST_CASE("a deadline further ahead than the sender's time-out comes from a clock ahead") {
    DeadlineCheck c = check(kNow + 10'000 + 375, 375, 0);
    CHECK(c.verdict == DeadlineVerdict::kClockAhead);
    CHECK(c.skew_ms == 10'000);
    // Ahead within the slack: in time.
    CHECK(check(kNow + 375 + kSlack, 375, 0).verdict == DeadlineVerdict::kServe);
  }

  TEST_CASE("extreme values from a peer do not overflow: INT64_MAX is a time like any other") {
    // The end of time, with no time-out, or with one as large: served.
    CHECK(check(kMax, 0, 0).verdict == DeadlineVerdict::kServe);
    CHECK(check(kMax, kMax, 0).verdict == DeadlineVerdict::kServe);
    // With a short time-out, that deadline is a clock far ahead; still served.
    DeadlineCheck c = check(kMax, 375, 0);
    CHECK(c.verdict == DeadlineVerdict::kClockAhead);
    CHECK(c.skew_ms == kMax - kNow - 375);
    // The earliest deadline, from a clock at the epoch, with the largest time-out: the skew
    // saturates.
    c = check(1, kMax, 0);
    CHECK(c.verdict == DeadlineVerdict::kClockBehind);
    CHECK(c.skew_ms == kMax);
    // A server clock at the end of time and a waited time as large.
    CHECK(check(1, 375, kMax, kMax).verdict == DeadlineVerdict::kExpired);
    CHECK(check(kMax, 375, 0, kMax).verdict == DeadlineVerdict::kServe);
  }
}
