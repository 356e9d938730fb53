// What a server does with a request's deadline (wire/messaging.hpp): a pure decision, with the
// clocks passed in, so that each rule can be tested with any numbers, the extreme ones included.
//
// A request carries, in its header, "deadline_ms" (the sender's wall clock when it sent the
// request plus its time-out, in milliseconds since the Unix epoch) and "timeout_ms" (that
// time-out; absent from older senders). The deadline is on the sender's clock and is compared
// with the server's, so the two hosts' clocks must agree to within `slack_ms`. When they do not,
// one request tells: a deadline further ahead than the sender's whole time-out (its clock is
// ahead), or one that passed longer ago than the request can have waited at the server (its
// clock is behind). The server knows how long that is at most: since it last found its queue
// empty, everything it reads arrived. A request late by more than that was not kept waiting here
// (short of a sender or network that held it for seconds): its sender's clock is behind.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

namespace sluice::core {

// A request as the server reads it. Every field is >= 0 (deadline_ms > 0): a decoder refuses a
// header with a negative or zero deadline or time-out.
struct ArrivedRequest {
  std::int64_t now_ms = 0;       // the server's wall clock, milliseconds since the Unix epoch
  std::int64_t deadline_ms = 0;  // the sender's deadline, by its clock
  std::int64_t timeout_ms = 0;   // the sender's time-out; 0: not stated
  // The longest the request can have waited at the server unread: the time since the server
  // last found its queue empty (a steady clock's difference).
  std::int64_t waited_at_most_ms = 0;
};

enum class DeadlineVerdict {
  kServe,        // in time (within the slack)
  kExpired,      // late, and it can have waited that long here: its sender gave up, drop it
  kClockBehind,  // late by the sender's clock, but it cannot have waited that long: serve it
  kClockAhead,   // the deadline is further ahead than the sender's time-out: serve it
};

struct DeadlineCheck {
  DeadlineVerdict verdict = DeadlineVerdict::kServe;
  // kClockBehind and kClockAhead: how far the sender's clock is off at least, in milliseconds
  // (saturating at INT64_MAX). 0 otherwise.
  std::int64_t skew_ms = 0;
};

// Decides by the rules above. Arithmetic is ordered so that no value, INT64_MAX included,
// overflows.
DeadlineCheck check_deadline(const ArrivedRequest& r, std::int64_t slack_ms);

}  // namespace sluice::core
