// Child processes: spawn with a captured stdout, read lines with a timeout, signal, wait with a
// timeout. Used by the job launcher and by the multi-process tests.
//
// Thread safety: one Subprocess belongs to one thread. The destructor kills (SIGKILL) and reaps
// a child that is still running, so no child outlives its owner by accident.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"

namespace sluice::core {

// Children spawned here get SLUICE_PARENT_PID=<our pid> in their environment. A sluice process
// that finds it there calls die_with_parent() at start-up, so that it is ended (SIGTERM) when its
// parent dies, even by kill -9 or a crash that never ran the parent's destructors.
inline constexpr const char* kParentPidVar = "SLUICE_PARENT_PID";

// Asks the kernel to send SIGTERM to this process when its parent exits, if `environment`
// ("K=V" entries, read by the caller at the edge) names a parent pid; exits at once if that
// parent is already gone.
void die_with_parent(const std::vector<std::string>& environment);

class Subprocess {
 public:
  struct Options {
    std::vector<std::string> argv;       // argv[0] is the program path
    std::vector<std::string> extra_env;  // "K=V" added to (or replacing in) the environment
    bool capture_stdout = true;          // else stdout is inherited
    bool stderr_to_stdout = false;       // capture stderr in the same pipe
    std::string stderr_path;             // else, when set: stderr appended to this file
    std::string cwd;           // the child's working directory (empty: ours); paths above are ours
    bool pipe_stdin = false;   // give the child a pipe as stdin (write_stdin), else ours
    bool search_path = false;  // a program named without '/' is looked for on PATH
  };

  static Result<std::unique_ptr<Subprocess>> spawn(Options options);
  // spawn() with stdout captured and nothing else set.
  static Result<std::unique_ptr<Subprocess>> spawn_argv(std::vector<std::string> argv) {
    Options o;
    o.argv = std::move(argv);
    return spawn(std::move(o));
  }
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }

  // The next line of the child's stdout (without the newline). Fails with timeout, or with
  // unavailable when the child closed its stdout.
  Result<std::string> read_line(std::chrono::milliseconds timeout);
  // Everything the child writes until it closes stdout or `timeout` passes.
  std::string read_all(std::chrono::milliseconds timeout);
  // The complete lines the child has written so far, without waiting (a supervisor calls it
  // every turn so that a chatty child never blocks on a full pipe). A partial line stays for
  // the next call.
  std::vector<std::string> drain_lines() { return drain_lines(std::string::npos, nullptr); }
  // The same for a child that is not trusted: a line longer than `max_line` bytes (its newline
  // not counted) is dropped as it comes, never held whole, and counted in `*overlong` (when not
  // null); what is held between calls stays under max_line bytes. One call reads at most
  // max(kDrainBudget, max_line) bytes, so a child that writes without pause cannot hold its
  // reader; the rest waits for the next call.
  std::vector<std::string> drain_lines(std::size_t max_line, std::uint64_t* overlong);
  static constexpr std::size_t kDrainBudget = std::size_t{1} << 20;

  // Writes all of `data` to the child's stdin (Options::pipe_stdin), waiting at most `timeout`
  // while the pipe is full. Fails with unavailable when the child closed it or is gone (a
  // timed-out write may have written part of `data`).
  Status write_stdin(const std::string& data, std::chrono::milliseconds timeout);
  // Writes what of `data` the child's stdin takes now, without waiting: the bytes written (0:
  // the pipe is full). Fails with unavailable when the child closed it or is gone.
  Result<std::size_t> write_some(std::string_view data);

  Status signal(int sig);
  // Waits for the child to exit: its exit status, or 128 + signal number if a signal ended it.
  Result<int> wait(std::chrono::milliseconds timeout);
  bool running();

 private:
  Subprocess() = default;
  // One wait of up to `wait_ms` for output, appending what came to buffer_: kData (some bytes),
  // kNone (nothing within the wait), kRetry (interrupted by a signal: try again), kClosed (the
  // output ended; out_fd_ is closed and -1).
  enum class Fill { kData, kNone, kRetry, kClosed };
  Fill fill(int wait_ms);
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int in_fd_ = -1;
  bool reaped_ = false;
  int exit_code_ = 0;
  std::string buffer_;
  bool skipping_ = false;  // drain_lines is dropping the rest of an over-long line
};

}  // namespace sluice::core
