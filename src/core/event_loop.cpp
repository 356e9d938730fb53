#include "core/event_loop.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <csignal>
#include <vector>

#include "core/log.hpp"

namespace sluice::core {

namespace asio = boost::asio;

struct EventLoop::Impl {
  asio::io_context io{1};  // concurrency hint 1: one thread drives the loop
  std::unique_ptr<asio::signal_set> signals;
  std::vector<std::function<void(int)>> shutdown_handlers;
  int shutdown_signal = 0;
  std::function<void(const boost::system::error_code&, int)> on_signal;
  // Keeps run() alive while there is nothing queued; released by stop().
  std::unique_ptr<asio::executor_work_guard<asio::io_context::executor_type>> guard;
};

namespace {

// Shared between the handle and the pending wait so that a destroyed handle can be detected
// from the completion handler without touching freed memory.
struct TimerState {
  explicit TimerState(asio::io_context& io) : timer(io) {}
  asio::steady_timer timer;
  std::function<void()> fn;
  Millis period{0};
  bool cancelled = false;
};

class TimerImpl final : public EventLoop::Timer {
 public:
  explicit TimerImpl(std::shared_ptr<TimerState> s) : s_(std::move(s)) {}
  ~TimerImpl() override { cancel(); }
  void cancel() override {
    if (s_->cancelled) return;
    s_->cancelled = true;
    s_->timer.cancel();
    s_->fn = nullptr;
  }

 private:
  std::shared_ptr<TimerState> s_;
};

void arm(const std::shared_ptr<TimerState>& s, Millis delay) {
  s->timer.expires_after(delay);
  s->timer.async_wait([s](const boost::system::error_code& ec) {
    if (ec || s->cancelled || !s->fn) return;
    if (s->period.count() > 0) {
      arm(s, s->period);
      auto fn = s->fn;  // fn may destroy the handle (and reset s->fn) while it runs
      fn();
    } else {
      auto fn = std::move(s->fn);
      s->fn = nullptr;
      fn();
    }
  });
}

struct WatchState {
  WatchState(asio::io_context& io, int fd) : sd(io, fd) {}
  asio::posix::stream_descriptor sd;
  std::function<void()> fn;
  bool cancelled = false;
  bool write_once = false;  // wait_writable: one call, for writability
  int owned_fd = -1;        // a duplicate this watch closes (wait_writable)
};

class FdWatchImpl final : public EventLoop::FdWatch {
 public:
  explicit FdWatchImpl(std::shared_ptr<WatchState> s) : s_(std::move(s)) {}
  ~FdWatchImpl() override {
    s_->cancelled = true;
    s_->fn = nullptr;
    boost::system::error_code ec;
    s_->sd.cancel(ec);
    s_->sd.release();  // the descriptor belongs to its owner (ZeroMQ, UCX): never close it here
    if (s_->owned_fd >= 0) ::close(s_->owned_fd);  // ...but a duplicate of it made here
  }

 private:
  std::shared_ptr<WatchState> s_;
};

void arm_watch(const std::shared_ptr<WatchState>& s) {
  const auto what = s->write_once ? asio::posix::stream_descriptor::wait_write
                                  : asio::posix::stream_descriptor::wait_read;
  s->sd.async_wait(what, [s](const boost::system::error_code& ec) {
    if (ec || s->cancelled) return;
    if (s->write_once) {
      auto fn = std::move(s->fn);
      s->fn = nullptr;
      if (fn) fn();
      return;
    }
    arm_watch(s);
    auto fn = s->fn;
    if (fn) fn();
  });
}

}  // namespace

EventLoop::EventLoop() : impl_(std::make_unique<Impl>()) {
  impl_->guard = std::make_unique<asio::executor_work_guard<asio::io_context::executor_type>>(
      impl_->io.get_executor());
}

EventLoop::~EventLoop() {
  // Destroy pending handlers (and the shared state they hold) before the members go.
  impl_->signals.reset();
  impl_->guard.reset();
  impl_->io.stop();
}

Result<std::unique_ptr<EventLoop>> EventLoop::create() {
  try {
    return std::unique_ptr<EventLoop>(new EventLoop());
  } catch (const std::exception& e) {
    return internal_error(std::string("event loop: cannot create: ") + e.what());
  }
}

Status EventLoop::run() {
  if (impl_->io.stopped()) impl_->io.restart();
  try {
    impl_->io.run();
  } catch (const std::exception& e) {
    // Handlers convert their own errors; reaching here is a bug in a handler.
    log::error("event loop: handler threw: {}", e.what());
    return internal_error(std::string("event loop: handler threw: ") + e.what());
  }
  if (impl_->shutdown_signal != 0) {
    return cancelled("stopped by signal " + std::to_string(impl_->shutdown_signal));
  }
  return {};
}

bool EventLoop::run_until(const std::function<bool()>& done, Millis timeout) {
  return run_until(done, Clock::now() + timeout);
}

bool EventLoop::run_until(const std::function<bool()>& done, Clock::time_point deadline) {
  if (impl_->io.stopped()) impl_->io.restart();
  if (done()) return true;
  // A timer at the deadline ends the wait on time. Waiting in whole milliseconds instead (as
  // this once did) rounds the last fraction of one down to a zero wait, and the loop spun through
  // it: 16 simulated rollouts, each waiting out a few milliseconds per step, kept both cores of
  // the dev box about 87% busy. The timer's handler may run after this returns (cancelled), so
  // it holds its flag by shared_ptr.
  auto expired = std::make_shared<bool>(false);
  asio::steady_timer timer(impl_->io, deadline);
  timer.async_wait([expired](const boost::system::error_code& ec) {
    if (!ec) *expired = true;
  });
  while (!*expired && !done()) {
    // Wake at least this often to re-check done().
    constexpr Millis kRecheck{50};
    impl_->io.run_one_for(kRecheck);
    if (impl_->io.stopped()) impl_->io.restart();
  }
  return done();
}

void EventLoop::stop() {
  asio::post(impl_->io, [this] {
    impl_->guard.reset();
    impl_->io.stop();
  });
}

bool EventLoop::stopped() const {
  return impl_->io.stopped();
}

void EventLoop::post(std::function<void()> fn) {
  asio::post(impl_->io, std::move(fn));
}

std::unique_ptr<EventLoop::Timer> EventLoop::after(Millis delay, std::function<void()> fn) {
  auto s = std::make_shared<TimerState>(impl_->io);
  s->fn = std::move(fn);
  arm(s, delay);
  return std::make_unique<TimerImpl>(s);
}

std::unique_ptr<EventLoop::Timer> EventLoop::every(Millis period, std::function<void()> fn) {
  auto s = std::make_shared<TimerState>(impl_->io);
  s->fn = std::move(fn);
  constexpr Millis kShortestPeriod{1};  // a zero period would spin the loop
  s->period = std::max(period, kShortestPeriod);
  arm(s, s->period);
  return std::make_unique<TimerImpl>(s);
}

std::unique_ptr<EventLoop::FdWatch> EventLoop::watch_readable(int fd,
                                                              std::function<void()> on_readable) {
  auto s = std::make_shared<WatchState>(impl_->io, fd);
  s->fn = std::move(on_readable);
  arm_watch(s);
  return std::make_unique<FdWatchImpl>(s);
}

std::unique_ptr<EventLoop::FdWatch> EventLoop::wait_writable(int fd,
                                                             std::function<void()> on_writable) {
  // epoll takes one registration per descriptor, and the owner may watch fd for reading too, so
  // this waits on a duplicate of it (closed with the watch).
  int dup_fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) {
    log::error("event loop: cannot duplicate descriptor {}: {}", fd, std::strerror(errno));
    dup_fd = fd;  // the registration fails below only if fd is watched already
  }
  auto s = std::make_shared<WatchState>(impl_->io, dup_fd);
  s->owned_fd = dup_fd == fd ? -1 : dup_fd;
  s->fn = std::move(on_writable);
  s->write_once = true;
  arm_watch(s);
  return std::make_unique<FdWatchImpl>(s);
}

void EventLoop::handle_shutdown_signals() {
  if (impl_->signals) return;
  impl_->signals = std::make_unique<asio::signal_set>(impl_->io, SIGINT, SIGTERM);
  impl_->on_signal = [this](const boost::system::error_code& ec, int sig) {
    Impl* impl = impl_.get();
    if (ec) return;
    if (impl->shutdown_signal != 0) {
      log::warn("second signal {}: stopping now", sig);
      impl->guard.reset();
      impl->io.stop();
      return;
    }
    impl->shutdown_signal = sig;
    log::info("signal {}: shutting down", sig);
    impl->guard.reset();  // run() returns once the handlers' remaining work is done
    impl->signals->async_wait(impl->on_signal);
    for (auto& h : impl->shutdown_handlers)
      h(sig);
    if (impl->shutdown_handlers.empty()) stop();
  };
  impl_->signals->async_wait(impl_->on_signal);
}

void EventLoop::on_shutdown(std::function<void(int)> handler) {
  impl_->shutdown_handlers.push_back(std::move(handler));
}

int EventLoop::shutdown_signal() const {
  return impl_->shutdown_signal;
}

}  // namespace sluice::core
