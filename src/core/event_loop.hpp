// The process event loop: one per process, over Boost.Asio's io_context (kept out of this header).
// ZeroMQ sockets and the UCX worker are driven from it through their file descriptors; timers
// (heartbeats, lease expiry, timeouts) are loop timers; SIGINT and SIGTERM lead to an orderly
// shutdown through handlers registered with on_shutdown().
//
// Thread safety: post() and stop() may be called from any thread. Everything else, and every
// callback, runs on the thread that calls run()/run_until() (the loop thread). Handles returned
// here (Timer, FdWatch) must be destroyed on the loop thread; destroying one cancels it, and its
// callback will not run afterwards.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "core/status.hpp"

namespace sluice::core {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

class EventLoop {
 public:
  // A cancellable timer. Destroying it cancels it.
  class Timer {
   public:
    virtual ~Timer() = default;
    virtual void cancel() = 0;
  };
  // A watch on a file descriptor's readability. Destroying it stops the watch (the descriptor
  // itself stays open: its owner closes it).
  class FdWatch {
   public:
    virtual ~FdWatch() = default;
  };

  static Result<std::unique_ptr<EventLoop>> create();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Runs until stop() is called (or there is nothing left to do). Returns why it stopped: ok
  // after stop(), cancelled after a shutdown signal.
  Status run();

  // Runs until done() returns true or `timeout` passes; returns whether done() is true. For
  // blocking helpers (command-line tools, tests); never call it from a loop callback.
  bool run_until(const std::function<bool()>& done, Millis timeout);
  // The same with an absolute deadline, kept to the clock's precision (a timer wakes the loop
  // at the deadline; nothing spins while it waits).
  bool run_until(const std::function<bool()>& done, Clock::time_point deadline);

  void stop();
  bool stopped() const;

  // Queues fn to run on the loop thread.
  void post(std::function<void()> fn);

  // Runs fn once after `delay`.
  [[nodiscard]] std::unique_ptr<Timer> after(Millis delay, std::function<void()> fn);
  // Runs fn every `period` (first run after one period) until the timer is destroyed.
  [[nodiscard]] std::unique_ptr<Timer> every(Millis period, std::function<void()> fn);

  // Calls on_readable each time fd becomes readable (edge semantics: on_readable must consume
  // everything that is ready, e.g. drain a ZeroMQ socket until ZMQ_EVENTS has no POLLIN).
  [[nodiscard]] std::unique_ptr<FdWatch> watch_readable(int fd, std::function<void()> on_readable);
  // Calls on_writable once, the next time fd is writable (a socket whose send buffer was full).
  [[nodiscard]] std::unique_ptr<FdWatch> wait_writable(int fd, std::function<void()> on_writable);

  // Catches SIGINT and SIGTERM. On the first signal, every registered handler runs (in order of
  // registration) and run() returns cancelled once the handlers have called stop() or there is
  // no more work; a second signal stops the loop at once.
  void handle_shutdown_signals();
  void on_shutdown(std::function<void(int signal)> handler);
  // The signal that asked for shutdown, or 0.
  int shutdown_signal() const;

 private:
  EventLoop();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::core
