// The event loop of one Python-facing object (a Publisher or a Reader), run on a background
// thread while Python goes on with its own work, so that the object keeps serving reads of the
// weights it holds and keeps its heartbeats.
//
// The C++ objects are loop-thread only (core/event_loop.hpp), and several of their calls are
// blocking (they run the loop themselves). So a Python call does not post work to the
// background thread; it takes the loop over: exclusive(fn) stops the background thread, runs fn
// on the calling thread (which then runs the loop as the C++ blocking calls expect), and starts
// the background thread again. The loop has no thread identity, only one thread at a time runs
// it, and every C++ object is touched by one thread at a time.
//
// Thread safety: exclusive() may be called from any thread; calls are serialized.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "core/event_loop.hpp"

namespace sluice::python {

class LoopThread {
 public:
  LoopThread() : loop_(core::EventLoop::create().value()) {}
  ~LoopThread() { pause(); }
  LoopThread(const LoopThread&) = delete;
  LoopThread& operator=(const LoopThread&) = delete;

  core::EventLoop& loop() { return *loop_; }

  // Runs fn on the calling thread with the loop to itself; the background thread runs the loop
  // again afterwards unless `keep_paused` (for close()).
  template <class F>
  auto exclusive(F&& fn, bool keep_paused = false) -> decltype(fn()) {
    std::lock_guard<std::mutex> g(mu_);
    pause();
    struct Resume {
      LoopThread* self;
      bool keep;
      ~Resume() {
        if (!keep) self->resume();
      }
    } resume{this, keep_paused};
    return fn();
  }

 private:
  // run_until returns this often to look at stop_ (pause() also wakes it with a post).
  static constexpr core::Millis kStopCheck{1000};

  void pause() {
    if (!thread_.joinable()) return;
    stop_ = true;
    loop_->post([] {});  // wakes run_until to look at stop_
    thread_.join();
  }
  void resume() {
    stop_ = false;
    thread_ = std::thread([this] {
      while (!stop_.load())
        loop_->run_until([this] { return stop_.load(); }, kStopCheck);
    });
  }

  std::unique_ptr<core::EventLoop> loop_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
};

}  // namespace sluice::python
