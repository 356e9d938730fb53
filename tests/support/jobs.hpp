// Whole jobs through `sluice run` for tests: the job file written, the launcher run as a process,
// its run folder's summary read back; and whether this machine can emulate hosts (root and
// network namespaces). The including test defines SLUICE_BIN (the sluice binary).
#pragma once

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/event_loop.hpp"
#include "core/process.hpp"

namespace sluice::testing {

struct JobRun {
  nlohmann::json summary;  // the run folder's summary.json (discarded when unreadable)
  int code = -1;           // the launcher's exit status
  std::string output;      // its stdout and stderr
  std::filesystem::path dir;
};

inline JobRun read_job_run(const std::filesystem::path& out, int code, std::string output) {
  JobRun r;
  r.code = code;
  r.output = std::move(output);
  r.dir = out;
  std::ifstream f(out / "summary.json");
  r.summary = nlohmann::json::parse(f, nullptr, false);
  return r;
}

// Writes `job` to dir/name.json and runs it into the fresh run folder dir/name.
inline JobRun run_sluice_job(const std::filesystem::path& dir, const std::string& name,
                             const nlohmann::json& job, core::Millis limit) {
  std::filesystem::create_directories(dir);
  std::filesystem::path file = dir / (name + ".json");
  std::ofstream(file) << job.dump(2);
  std::filesystem::path out = dir / name;
  std::filesystem::remove_all(out);
  core::Subprocess::Options o;
  o.argv = {SLUICE_BIN, "run", file.string(), "--out", out.string()};
  o.stderr_to_stdout = true;
  auto p = core::Subprocess::spawn(o).value();
  std::string output = p->read_all(limit);
  auto code = p->wait(core::Millis(5000));
  return read_job_run(out, code.is_ok() ? *code : -1, std::move(output));
}

inline bool can_emulate_hosts() {
  if (::geteuid() != 0) return false;
  std::string ns = "sluice-probe-" + std::to_string(::getpid());
  core::Subprocess::Options o;
  o.argv = {"/bin/sh", "-c", "ip netns add " + ns + " && ip netns del " + ns};
  auto p = core::Subprocess::spawn(o);
  if (!p.is_ok()) return false;
  auto code = (*p)->wait(core::Millis(10000));
  return code.is_ok() && *code == 0;
}

}  // namespace sluice::testing
