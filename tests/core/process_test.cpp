// A child that is not trusted: its stdin written without waiting (write_some never blocks on a
// child that stops reading) and its output read in bounded lines (drain_lines with a limit drops
// an over-long line as it comes and counts it).
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "core/process.hpp"

using namespace sluice;
using core::Subprocess;
using Millis = std::chrono::milliseconds;

namespace {

std::unique_ptr<Subprocess> shell(const std::string& script, bool pipe_stdin) {
  Subprocess::Options o;
  o.argv = {"/bin/sh", "-c", script};
  o.pipe_stdin = pipe_stdin;
  auto p = Subprocess::spawn(o);
  REQUIRE(p.is_ok());
  return std::move(p).value();
}

// drain_lines(max_line) until the child closed its output (at most ~10 s).
std::vector<std::string> drain_to_end(Subprocess& p, std::size_t max_line,
                                      std::uint64_t* overlong) {
  constexpr Millis kPause{5};
  std::vector<std::string> lines;
  for (int i = 0; i < 2000; ++i) {
    for (auto& l : p.drain_lines(max_line, overlong))
      lines.push_back(std::move(l));
    if (!p.running()) {
      for (auto& l : p.drain_lines(max_line, overlong))
        lines.push_back(std::move(l));
      break;
    }
    std::this_thread::sleep_for(kPause);
  }
  return lines;
}

}  // namespace

TEST_SUITE("process") {
  TEST_CASE("bounded lines: an over-long line is dropped and counted, the next is kept") {
    // 3000 bytes with a newline, a good line, 5000 bytes written in pieces with no newline for
    // a while, its end, another good line, and a last line with no newline at all.
    auto p = shell(
        "head -c 3000 /dev/zero | tr '\\0' a; echo; echo ok1; "
        "for i in 1 2 3 4 5; do head -c 1000 /dev/zero | tr '\\0' b; sleep 0.02; done; "
        "echo tail; echo ok2; printf last",
        false);
    std::uint64_t overlong = 0;
    std::vector<std::string> lines = drain_to_end(*p, 1000, &overlong);
    CHECK(lines == std::vector<std::string>{"ok1", "ok2", "last"});
    CHECK(overlong == 2);
  }

  TEST_CASE("unbounded drain_lines keeps every line whole") {
    auto p = shell("head -c 3000 /dev/zero | tr '\\0' a; echo; printf end", false);
    std::vector<std::string> lines = drain_to_end(*p, std::string::npos, nullptr);
    REQUIRE(lines.size() == 2);
    CHECK(lines[0] == std::string(3000, 'a'));
    CHECK(lines[1] == "end");
  }

  TEST_CASE("write_some never waits on a child that stops reading") {
    auto p = shell("exec sleep 30", true);
    const std::string chunk(1 << 16, 'x');
    std::size_t written = 0;
    const auto t0 = std::chrono::steady_clock::now();
    bool full = false;
    for (int i = 0; i < 64 && !full; ++i) {
      auto n = p->write_some(chunk);
      REQUIRE(n.is_ok());
      written += *n;
      full = *n < chunk.size();
    }
    const auto took = std::chrono::steady_clock::now() - t0;
    CHECK(full);  // the pipe filled: the rest was left, not waited for
    CHECK(written < (64u << 16));
    // Generous: a blocking write would wait for ever (write_stdin's old wait was 2 s per call).
    CHECK(took < std::chrono::seconds(1));
    CHECK(p->signal(SIGKILL).is_ok());
  }

  TEST_CASE("write_some fails once the child is gone") {
    auto p = shell("exit 0", true);
    REQUIRE(p->wait(Millis(10000)).is_ok());
    auto n = p->write_some("hello\n");
    CHECK_FALSE(n.is_ok());
  }
}
