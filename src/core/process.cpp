#include "core/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/log.hpp"

extern char** environ;

namespace sluice::core {

using Clock = std::chrono::steady_clock;

// wait() polls waitpid this often.
constexpr std::chrono::milliseconds kWaitPoll{5};

void die_with_parent(const std::vector<std::string>& environment) {
  const std::string prefix = std::string(kParentPidVar) + "=";
  for (const auto& e : environment) {
    if (e.rfind(prefix, 0) != 0) continue;
    pid_t parent = static_cast<pid_t>(std::atol(e.c_str() + prefix.size()));
    if (parent <= 0) return;
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    // The parent may have died before prctl took effect: then we were re-parented already.
    if (::getppid() != parent) std::_Exit(0);
    return;
  }
}

Result<std::unique_ptr<Subprocess>> Subprocess::spawn(Options options) {
  if (options.argv.empty()) return invalid_argument("spawn: empty argv");
  int fds[2] = {-1, -1};
  if (options.capture_stdout && ::pipe2(fds, O_CLOEXEC) != 0) {
    return internal_error(std::string("spawn: pipe: ") + std::strerror(errno));
  }
  int in[2] = {-1, -1};
  if (options.pipe_stdin && ::pipe2(in, O_CLOEXEC) != 0) {
    if (options.capture_stdout) {
      ::close(fds[0]);
      ::close(fds[1]);
    }
    return internal_error(std::string("spawn: pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (options.pipe_stdin) posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
  if (options.capture_stdout) {
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    if (options.stderr_to_stdout) posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
  }
  if (!options.stderr_path.empty() && !options.stderr_to_stdout) {
    // 0600: a role's log is its owner's (it may name paths and peers nobody else should read).
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, options.stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0600);
  }
  // Last: the file actions above open their paths from our working directory.
  if (!options.cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, options.cwd.c_str());

  // Environment: ours, with extra_env replacing same-named entries.
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string entry(*e);
    std::string key = entry.substr(0, entry.find('='));
    bool replaced = key == kParentPidVar;  // always ours, not an inherited one
    for (const auto& x : options.extra_env)
      replaced = replaced || x.substr(0, x.find('=')) == key;
    if (!replaced) env.push_back(std::move(entry));
  }
  for (const auto& x : options.extra_env)
    env.push_back(x);
  env.push_back(std::string(kParentPidVar) + "=" + std::to_string(::getpid()));
  std::vector<char*> envp;
  for (auto& e : env)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (auto& a : options.argv)
    argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_t pid = -1;
  int rc = options.search_path
               ? ::posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), envp.data())
               : ::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (options.capture_stdout) ::close(fds[1]);
  if (options.pipe_stdin) ::close(in[0]);
  if (rc != 0) {
    if (options.capture_stdout) ::close(fds[0]);
    if (options.pipe_stdin) ::close(in[1]);
    return unavailable("spawn " + options.argv[0] + ": " + std::strerror(rc));
  }
  std::unique_ptr<Subprocess> p(new Subprocess());
  p->pid_ = pid;
  p->out_fd_ = options.capture_stdout ? fds[0] : -1;
  if (options.pipe_stdin) {
    p->in_fd_ = in[1];
    ::fcntl(p->in_fd_, F_SETFL, ::fcntl(p->in_fd_, F_GETFL) | O_NONBLOCK);
  }
  return p;
}

Subprocess::~Subprocess() {
  if (!reaped_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (in_fd_ >= 0) ::close(in_fd_);
}

Result<std::size_t> Subprocess::write_some(std::string_view data) {
  if (in_fd_ < 0) return unavailable("child " + std::to_string(pid_) + " has no stdin pipe");
  // A child that closed its stdin makes the write EPIPE, and the signal that comes with it would
  // end this process: it is blocked meanwhile, and taken if it came.
  sigset_t pipe_signal, old;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_signal, &old);
  std::size_t sent = 0;
  Status result;
  while (sent < data.size()) {
    ssize_t n = ::write(in_fd_, data.data() + sent, data.size() - sent);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;  // full: the rest waits
    const int err = n < 0 ? errno : EIO;
    if (err == EPIPE) {
      timespec now{};
      ::sigtimedwait(&pipe_signal, nullptr, &now);
    }
    result =
        unavailable("child " + std::to_string(pid_) + ": writing its stdin: " + std::strerror(err));
    break;
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (!result.is_ok()) return result;
  return sent;
}

Status Subprocess::write_stdin(const std::string& data, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string_view rest(data);
  while (true) {
    SLUICE_ASSIGN_OR_RETURN(std::size_t n, write_some(rest));
    rest.remove_prefix(n);
    if (rest.empty()) return {};
    if (Clock::now() >= deadline) {
      return unavailable("child " + std::to_string(pid_) + ": writing its stdin: stalled");
    }
    constexpr std::chrono::milliseconds kStdinRetry{1};  // between tries while the pipe is full
    std::this_thread::sleep_for(kStdinRetry);
  }
}

Result<std::string> Subprocess::read_line(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (true) {
    auto nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (out_fd_ < 0) return unavailable("child " + std::to_string(pid_) + " closed its output");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return timeout_error("no line from child " + std::to_string(pid_) + " within " +
                           std::to_string(timeout.count()) + " ms");
    }
    if (fill(static_cast<int>(left.count())) == Fill::kClosed && !buffer_.empty()) {
      std::string rest = std::move(buffer_);
      buffer_.clear();
      return rest;
    }
  }
}

Subprocess::Fill Subprocess::fill(int wait_ms) {
  pollfd pfd{out_fd_, POLLIN, 0};
  int n = ::poll(&pfd, 1, wait_ms);
  if (n < 0 && errno == EINTR) return Fill::kRetry;
  if (n <= 0) return Fill::kNone;
  char buf[4096];
  ssize_t got = ::read(out_fd_, buf, sizeof buf);
  if (got < 0 && errno == EINTR) return Fill::kRetry;
  if (got <= 0) {
    ::close(out_fd_);
    out_fd_ = -1;
    return Fill::kClosed;
  }
  buffer_.append(buf, static_cast<std::size_t>(got));
  return Fill::kData;
}

std::string Subprocess::read_all(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  std::string out;
  while (out_fd_ >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    auto line = read_line(left);
    if (!line.is_ok()) break;
    out += *line + "\n";
  }
  return out + buffer_;
}

std::vector<std::string> Subprocess::drain_lines(std::size_t max_line, std::uint64_t* overlong) {
  std::vector<std::string> lines;
  auto count_overlong = [&] {
    if (overlong) ++*overlong;
  };
  // Moves the complete lines out of buffer_; what stays is under max_line bytes.
  auto cut = [&] {
    std::size_t from = 0;
    for (auto nl = buffer_.find('\n'); nl != std::string::npos; nl = buffer_.find('\n', from)) {
      if (skipping_) {
        skipping_ = false;  // the over-long line ends here
      } else if (nl - from > max_line) {
        count_overlong();
      } else {
        lines.push_back(buffer_.substr(from, nl - from));
      }
      from = nl + 1;
    }
    buffer_.erase(0, from);
    if (!skipping_ && buffer_.size() > max_line) {
      count_overlong();
      skipping_ = true;
    }
    if (skipping_) buffer_.clear();
  };
  const std::size_t budget =
      max_line == std::string::npos ? std::string::npos : std::max(kDrainBudget, max_line);
  std::size_t taken = 0;
  while (out_fd_ >= 0 && taken < budget) {
    const std::size_t had = buffer_.size();
    const Fill f = fill(0);
    if (f == Fill::kNone) break;
    if (f == Fill::kClosed) {
      // The last line may lack its newline.
      if (!buffer_.empty() && buffer_.back() != '\n' && !skipping_) buffer_ += '\n';
      skipping_ = false;
      break;
    }
    if (f != Fill::kData) continue;
    taken += buffer_.size() - had;
    // Only new bytes are searched: a long line costs its length, not its length squared.
    if (skipping_ || buffer_.size() > max_line || buffer_.find('\n', had) != std::string::npos) {
      cut();
    }
  }
  cut();
  return lines;
}

Status Subprocess::signal(int sig) {
  if (reaped_) return failed_precondition("child " + std::to_string(pid_) + " already exited");
  if (::kill(pid_, sig) != 0) return internal_error(std::string("kill: ") + std::strerror(errno));
  return {};
}

Result<int> Subprocess::wait(std::chrono::milliseconds timeout) {
  if (reaped_) return exit_code_;
  auto deadline = Clock::now() + timeout;
  while (true) {
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return exit_code_;
    }
    if (r < 0 && errno != EINTR)
      return internal_error(std::string("waitpid: ") + std::strerror(errno));
    if (Clock::now() >= deadline) {
      return timeout_error("child " + std::to_string(pid_) + " still running after " +
                           std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(kWaitPoll);
  }
}

bool Subprocess::running() {
  if (reaped_) return false;
  auto r = wait(std::chrono::milliseconds(0));
  return !r.is_ok();
}

}  // namespace sluice::core
