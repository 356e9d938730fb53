#include "bench/harness.hpp"

#include <fmt/format.h>

namespace sluice::cli {

const std::vector<std::string> kEmulatedHostUcxEnv = {"UCX_TLS=tcp", "UCX_NET_DEVICES=eth0",
                                                      "UCX_WARN_UNUSED_ENV_VARS=n"};

std::vector<std::string> in_emulated_host(const std::string& emuhosts, const std::string& prefix,
                                          unsigned host) {
  return {emuhosts, "exec", "--prefix", prefix, std::to_string(host)};
}

core::Result<std::string> run_capture(const std::vector<std::string>& argv,
                                      const std::vector<std::string>& env,
                                      std::chrono::milliseconds timeout, bool merge_stderr) {
  core::Subprocess::Options o;
  o.argv = argv;
  o.extra_env = env;
  o.stderr_to_stdout = merge_stderr;
  SLUICE_ASSIGN_OR_RETURN(auto p, core::Subprocess::spawn(o));
  std::string out = p->read_all(timeout);
  SLUICE_ASSIGN_OR_RETURN(int code, p->wait(kExitWait));
  if (code != 0) {
    const std::string name = argv.size() > 1 ? argv[0] + " " + argv[1] : argv[0];
    return core::internal_error(fmt::format("{} exited {}: {}", name, code,
                                            out.substr(out.size() > 2000 ? out.size() - 2000 : 0)));
  }
  return out;
}

core::Result<Started> start_ready(core::Subprocess::Options options, const std::string& ready,
                                  std::chrono::milliseconds timeout, const std::string& what) {
  Started s;
  SLUICE_ASSIGN_OR_RETURN(s.proc, core::Subprocess::spawn(std::move(options)));
  do {
    auto line = s.proc->read_line(timeout);
    if (!line.is_ok()) return line.status().with_context(what + " did not start");
    s.line = *line;
  } while (s.line.rfind(ready, 0) != 0);
  return s;
}

}  // namespace sluice::cli
