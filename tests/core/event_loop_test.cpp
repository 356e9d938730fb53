#include <doctest/doctest.h>

#include <sys/resource.h>

#include <csignal>
#include <thread>

#include "core/event_loop.hpp"
#include "core/process.hpp"

using namespace sluice::core;

TEST_SUITE("core.event_loop") {
  TEST_CASE("timers fire in order -- a destroyed timer never fires") {
    auto loop = EventLoop::create().value();
    std::vector<int> order;
    auto t2 = loop->after(Millis(40), [&] { order.push_back(2); });
    auto t1 = loop->after(Millis(10), [&] { order.push_back(1); });
    auto t3 = loop->after(Millis(20), [&] { order.push_back(3); });
    t3.reset();
    CHECK(loop->run_until([&] { return order.size() == 2; }, Millis(5000)));
    CHECK(order == std::vector<int>{1, 2});
    // nothing more arrives
    loop->run_until([] { return false; }, Millis(60));
    CHECK(order.size() == 2);
  }

  TEST_CASE("a periodic timer repeats until cancelled from its own callback") {
    auto loop = EventLoop::create().value();
    int n = 0;
    std::unique_ptr<EventLoop::Timer> t;
    t = loop->every(Millis(5), [&] {
      if (++n == 3) t.reset();
    });
    CHECK(loop->run_until([&] { return n == 3; }, Millis(5000)));
    loop->run_until([] { return false; }, Millis(40));
    CHECK(n == 3);
  }

  TEST_CASE("post from another thread runs on the loop -- stop ends run()") {
    auto loop = EventLoop::create().value();
    std::thread::id loop_thread = std::this_thread::get_id();
    std::thread::id ran_on;
    std::thread other([&] {
      loop->post([&] {
        ran_on = std::this_thread::get_id();
        loop->stop();
      });
    });
    Status s = loop->run();
    other.join();
    CHECK(s.is_ok());
    CHECK(ran_on == loop_thread);
  }

  TEST_CASE("a readable fd is reported -- run_until gives up at its timeout") {
    auto loop = EventLoop::create().value();
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    int reads = 0;
    auto w = loop->watch_readable(fds[0], [&] {
      char b[16];
      while (::read(fds[0], b, sizeof b) == static_cast<ssize_t>(sizeof b)) {
      }
      ++reads;
    });
    auto t0 = Clock::now();
    CHECK_FALSE(loop->run_until([&] { return reads > 0; }, Millis(100)));
    CHECK(Clock::now() - t0 >= Millis(100));
    REQUIRE(::write(fds[1], "x", 1) == 1);
    CHECK(loop->run_until([&] { return reads == 1; }, Millis(5000)));
    w.reset();
    ::close(fds[0]);
    ::close(fds[1]);
  }

  TEST_CASE("run_until a deadline waits to it without spinning -- also with nothing to do") {
    auto loop = EventLoop::create().value();
    auto thread_cpu = [] {
      rusage u{};
      ::getrusage(RUSAGE_THREAD, &u);
      return std::chrono::seconds(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
             std::chrono::microseconds(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
    };
    // Waits shorter than a millisecond, as a simulated rollout makes for each modelled step: the
    // loop once rounded them down to zero and spun through them on a whole core.
    auto wall0 = Clock::now();
    auto cpu0 = thread_cpu();
    bool early = false, done_reported = false;
    for (int i = 0; i < 100; ++i) {
      auto deadline = Clock::now() + std::chrono::microseconds(700);
      done_reported |= loop->run_until([] { return false; }, deadline);
      early |= Clock::now() < deadline;
    }
    auto wall = Clock::now() - wall0;
    auto cpu = thread_cpu() - cpu0;
    CHECK_FALSE(early);
    CHECK_FALSE(done_reported);
    CHECK(wall >= std::chrono::microseconds(70000));
    // Sleeping, this thread uses a small share of the wall time; spinning, it used all of it.
    CHECK(cpu * 2 < wall);

    // A stopped loop with no work left still waits out the deadline, and a deadline already past
    // returns at once; a posted handler runs during the wait.
    loop->stop();
    int ran = 0;
    loop->post([&] { ++ran; });
    auto deadline = Clock::now() + Millis(20);
    CHECK_FALSE(loop->run_until([] { return false; }, deadline));
    CHECK(Clock::now() >= deadline);
    CHECK(ran == 1);
    CHECK_FALSE(loop->run_until([] { return false; }, Clock::now() - Millis(1)));
    CHECK(loop->run_until([&] { return ran == 1; }, Clock::now() + Millis(5000)));
  }

  TEST_CASE("SIGTERM leads to an orderly shutdown of a real process") {
    auto p = Subprocess::spawn_argv({SLUICE_ECHO_SERVER}).value();
    auto line = p->read_line(Millis(10000));
    REQUIRE(line.is_ok());
    CHECK(line->rfind("endpoint tcp://127.0.0.1:", 0) == 0);
    REQUIRE(p->signal(SIGTERM).is_ok());
    auto bye = p->read_line(Millis(10000));
    REQUIRE(bye.is_ok());
    CHECK(*bye == "shutdown: orderly");
    auto code = p->wait(Millis(10000));
    REQUIRE(code.is_ok());
    CHECK(*code == 0);
  }
}
