// The one start-up path of the role subcommands (`sluice weightstore`, `relay`,
// `rollout-manager`, `rollout`, `actor`): load the role's file and print the effective
// configuration, prepare the process, make the event loop and the /metrics endpoint, create the
// role, print its ready line (its first line on stdout: the launcher waits for it) and the metrics
// line, and run it until it ends or a shutdown signal stops it. Each role fills in RoleSteps with
// what differs: its configuration type and section, its name, how it prepares and creates itself.
//
// Exit codes: 0 done (or --print-config), 1 the role failed, 2 a usage or configuration error.
// Errors are printed once, as "sluice NAME: ...", on stderr.
//
// Thread safety: main's thread only (it sets the process's log level and runs the event loop).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/event_loop.hpp"
#include "core/status.hpp"
#include "launch/role_file.hpp"

namespace sluice::cli {

inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

// A created role. `stop` and `run` own the role's objects (they capture them); they are destroyed
// after run returns, before the metrics endpoint and the event loop.
struct RoleRun {
  std::string ready;                  // printed on stdout once the role is up
  std::function<void()> stop;         // on the first SIGINT or SIGTERM, from the event loop
  std::function<core::Status()> run;  // runs the role to its end; an error exits with 1
};

// What differs between the roles. Members in the order the start-up path uses them.
template <typename Config>
struct RoleSteps {
  std::string name;  // the subcommand: errors "sluice NAME: ...", the metrics role label
  // Fills in the section's defaults that depend on the process (an id from the pid) before the
  // effective configuration is printed. Optional.
  std::function<void(Config&)> complete = {};
  // After the configuration is printed, before the event loop: the process's name and id, its
  // model device, its engine. Optional; an error exits with `prepare_exit`.
  std::function<core::Status(Config&)> prepare = {};
  int prepare_exit = kExitFailed;
  // The id label of the metrics endpoint's sluice_role_info{role=NAME, id=...}.
  std::function<std::string(const Config&)> metrics_id;
  // Creates the role on the loop; an error exits with 1.
  std::function<core::Result<RoleRun>(core::EventLoop&, Config&)> create;
};

// Prints "sluice NAME: STATUS" on stderr; returns `code`.
int role_failed(const std::string& name, const core::Status& status, int code);

// The start-up path from the event loop on, for any configuration type.
int run_role_process(const std::string& name, const std::string& metrics_listen,
                     const std::string& metrics_id,
                     const std::function<core::Result<RoleRun>(core::EventLoop&)>& create);

template <typename Config, const char* kSection>
int start_role(const RoleArgs& args, const std::vector<std::string>& overrides,
               const RoleSteps<Config>& steps) {
  bool printed = false;
  auto cfg = load_role<Config, kSection>(args, overrides, &printed, steps.complete);
  if (!cfg.is_ok()) return role_failed(steps.name, cfg.status(), kExitUsage);
  if (printed) return 0;
  Config& section = cfg->section;
  if (steps.prepare) {
    if (core::Status s = steps.prepare(section); !s.is_ok()) {
      return role_failed(steps.name, s, steps.prepare_exit);
    }
  }
  return run_role_process(steps.name, cfg->metrics_listen, steps.metrics_id(section),
                          [&](core::EventLoop& loop) { return steps.create(loop, section); });
}

}  // namespace sluice::cli
