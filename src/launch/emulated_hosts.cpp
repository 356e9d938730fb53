#include "launch/emulated_hosts.hpp"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/event_loop.hpp"
#include "core/log.hpp"
#include "core/process.hpp"
#include "launch/executable.hpp"

namespace sluice::cli {

namespace log = core::log;
using core::Millis;

namespace {

// The emulated-hosts script: bringing the hosts up, taking them down, and its exit once its output
// has ended.
constexpr Millis kHostsUpTimeout{120000};
constexpr Millis kHostsDownTimeout{60000};
constexpr Millis kScriptExitWait{10000};

// A tc rate: digits, an optional fraction, then a unit in letters ("500mbit", "1.5gbit").
bool is_rate(const std::string& r) {
  std::size_t i = 0, digits = 0;
  while (i < r.size() && std::isdigit(static_cast<unsigned char>(r[i])))
    ++i, ++digits;
  if (digits == 0) return false;
  if (i < r.size() && r[i] == '.') {
    std::size_t frac = ++i;
    while (i < r.size() && std::isdigit(static_cast<unsigned char>(r[i])))
      ++i;
    if (i == frac) return false;
  }
  while (i < r.size() && std::isalpha(static_cast<unsigned char>(r[i])))
    ++i;
  return i == r.size();
}

bool is_prefix(const std::string& p) {
  if (p.empty() || p.size() > 30) return false;
  return std::all_of(p.begin(), p.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

}  // namespace

core::Result<double> link_rate_bytes_per_s(const std::string& rate) {
  if (!is_rate(rate)) {
    return core::invalid_argument(
        fmt::format("'{}' is not a rate (tc syntax: 500mbit, 1gbit, 10mbps)", rate));
  }
  std::size_t unit = 0;
  while (unit < rate.size() && !std::isalpha(static_cast<unsigned char>(rate[unit])))
    ++unit;
  const double n = std::stod(rate.substr(0, unit));
  std::string u = rate.substr(unit);
  std::transform(u.begin(), u.end(), u.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // tc's units (tc(8)): bits ("bit") or bytes ("bps") per second after an SI (k, m, g, t) or IEC
  // (ki, mi, gi, ti) prefix; a bare number is bytes per second.
  double per_unit = 1;
  if (u.size() >= 3 && u.compare(u.size() - 3, 3, "bit") == 0) {
    per_unit = 1.0 / 8;
    u.resize(u.size() - 3);
  } else if (u.size() >= 3 && u.compare(u.size() - 3, 3, "bps") == 0) {
    u.resize(u.size() - 3);
  } else if (!u.empty()) {
    u = "?" + u;  // no unit tc knows
  }
  static const std::pair<const char*, double> kPrefixes[] = {
      {"", 1},           {"k", 1e3},           {"m", 1e6},
      {"g", 1e9},        {"t", 1e12},          {"ki", 1024.0},
      {"mi", 1048576.0}, {"gi", 1073741824.0}, {"ti", 1099511627776.0}};
  for (const auto& [prefix, factor] : kPrefixes) {
    if (u == prefix) return n * factor * per_unit;
  }
  return core::invalid_argument(
      fmt::format("'{}' is not a rate: unknown unit (tc syntax: 500mbit, 1gbit, 10mbps)", rate));
}

core::Status EmulatedHostsConfig::validate() const {
  if (count > 64) return core::invalid_argument("hosts.count must be at most 64");
  if (joiner_hosts > 0 && joiner_hosts >= count) {
    return core::invalid_argument(fmt::format(
        "hosts.joiner_hosts ({}) must be fewer than hosts.count ({}): the job's own relays and "
        "rollouts need a host",
        joiner_hosts, count));
  }
  if (count > 0 && !is_rate(link_rate)) {
    return core::invalid_argument(
        fmt::format("hosts.link_rate '{}' is not a rate (tc syntax: 500mbit, 1gbit)", link_rate));
  }
  if (count > 0 && !trainer_link_rate.empty() && trainer_link_rate != "none" &&
      !is_rate(trainer_link_rate)) {
    return core::invalid_argument(
        fmt::format("hosts.trainer_link_rate '{}' is not a rate (tc syntax: 500mbit, 1gbit), "
                    "none or empty",
                    trainer_link_rate));
  }
  if (!is_prefix(prefix)) {
    return core::invalid_argument("hosts.prefix must be 1-30 letters, digits, '_' or '-'");
  }
  return {};
}

namespace {

core::Status run_script(const std::vector<std::string>& argv, Millis timeout) {
  core::Subprocess::Options o;
  o.argv = argv;
  o.stderr_to_stdout = true;
  SLUICE_ASSIGN_OR_RETURN(auto p, core::Subprocess::spawn(o));
  std::string out = p->read_all(timeout);
  auto code = p->wait(kScriptExitWait);
  if (!code.is_ok() || *code != 0) {
    return core::internal_error(
        fmt::format("{} {} failed: {}", argv[0], argv.size() > 1 ? argv[1] : "", out));
  }
  return {};
}

}  // namespace

core::Result<std::unique_ptr<EmulatedHosts>> EmulatedHosts::up(
    const EmulatedHostsConfig& config, const std::vector<std::string>& environment) {
  SLUICE_TRY(config.validate());
  if (::geteuid() != 0) {
    return core::failed_precondition(
        "emulated hosts need root (network namespaces and tc); run as root or set hosts.count 0");
  }
  std::unique_ptr<EmulatedHosts> h(new EmulatedHosts());
  h->config_ = config;
  h->script_ = find_emuhosts(environment);
  if (h->script_.empty()) {
    return core::not_found("cannot find scripts/emuhosts.sh (set SLUICE_EMUHOSTS)");
  }
  h->home_ns_ = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (h->home_ns_ < 0) {
    return core::internal_error(fmt::format("open /proc/self/ns/net: {}", std::strerror(errno)));
  }
  log::info("job: {} emulated hosts behind {} links{} ({})", config.count + 1, config.link_rate,
            config.trainer_link_rate.empty()
                ? std::string()
                : fmt::format(", host 0's {}", config.trainer_link_rate == "none"
                                                   ? std::string("not limited")
                                                   : config.trainer_link_rate),
            h->script_);
  std::vector<std::string> argv{
      h->script_, "up",         std::to_string(config.count + 1), "--rate", config.link_rate,
      "--prefix", config.prefix};
  if (!config.trainer_link_rate.empty()) {
    argv.insert(argv.end(), {"--host-rate", "0=" + config.trainer_link_rate});
  }
  SLUICE_TRY(run_script(argv, kHostsUpTimeout));
  return h;
}

EmulatedHosts::~EmulatedHosts() {
  if (home_ns_ >= 0) {
    if (::setns(home_ns_, CLONE_NEWNET) != 0)
      log::warn("job: could not return to the starting network namespace: {}",
                std::strerror(errno));
    ::close(home_ns_);
  }
  auto st = run_script({script_, "down", "--prefix", config_.prefix}, kHostsDownTimeout);
  if (!st.is_ok()) log::warn("job: removing the emulated hosts: {}", st.to_string());
}

core::Status EmulatedHosts::enter(std::uint32_t index) {
  std::string path = fmt::format("/run/netns/{}{}", config_.prefix, index);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return core::internal_error(fmt::format("open {}: {}", path, std::strerror(errno)));
  int rc = ::setns(fd, CLONE_NEWNET);
  int err = errno;
  ::close(fd);
  if (rc != 0) return core::internal_error(fmt::format("setns {}: {}", path, std::strerror(err)));
  return {};
}

std::vector<std::string> EmulatedHosts::exec_prefix(std::uint32_t index) const {
  return {script_, "exec", "--prefix", config_.prefix, std::to_string(index)};
}

std::string EmulatedHosts::address(std::uint32_t index) {
  return fmt::format("198.18.0.{}", index + 1);
}

}  // namespace sluice::cli
