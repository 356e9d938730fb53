// Fault injection for a whole job, and the harness that checks the job survived it.
//
// ChaosConfig (the job file's `chaos` section) makes the launcher SIGKILL random roles at random
// times; the supervisor restarts them. `sluice chaos JOB.json --kills N` runs the job once
// without faults and once with them, then checks and prints: kills and restarts per role,
// trajectories generated / consumed / lost / consumed twice, versions that went backwards in
// any reader, chunks accepted that failed verification or came from another version, whether
// the job completed, and wall time, trained tokens and held-out accuracy against the fault-free
// run.
//
// Thread safety: one thread (the launcher's).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace sluice::cli {

class Supervisor;

struct ChaosConfig {
  std::uint32_t kills = 0;  // SIGKILLs of random roles over the job
  double every_s = 0;       // one kill every this many seconds (0: at random times in the window)
  double first_s = 3;       // no kill before this many seconds after the first published version
  double window_s = 60;     // every_s 0: kills at uniformly random times in [first_s, +window_s]
  std::string roles = "weightstore,relay,rollout-manager,rollout,actor";  // which may be killed
  std::uint64_t seed = 1;  // the kill times and targets follow from it

  template <typename V>
  void describe(V& v) {
    v("kills", kills, "SIGKILL this many random roles during the job (0: none)");
    v("every_s", every_s, "one kill every this many seconds (0: random times in the window)");
    v("first_s", first_s, "no kill before this many seconds after the first version is published");
    v("window_s", window_s, "every_s 0: kills at random times in [first_s, first_s + window_s]");
    v("roles", roles, "comma-separated roles that may be killed");
    v("seed", seed, "seed of the kill times and targets");
  }
  core::Status validate() const;
  std::vector<std::string> role_list() const;
};

// The kill times and targets of one job, drawn from the seed at the start, and carried out by
// due() as the job's time passes.
class ChaosSchedule {
 public:
  ChaosSchedule(const ChaosConfig& config, Supervisor& supervisor);
  // Kills what is due at `elapsed` seconds; returns the name killed ("" when none).
  std::string due(double elapsed);
  const std::vector<double>& times() const { return times_; }

 private:
  ChaosConfig cfg_;
  Supervisor* sup_;
  std::vector<double> times_;
  std::vector<std::uint64_t> picks_;  // a draw per kill: which eligible process
  std::size_t next_ = 0;
};

struct ChaosArgs {
  std::string job_path;
  std::vector<std::string> overrides;
  std::uint32_t kills = 20;
  std::string roles;  // empty: every role
  double every_s = 0;
  std::uint64_t seed = 0;  // 0: drawn from the clock (and printed)
  double duration_s = 0;   // both runs stop after this long (trained tokens compared)
  // With duration_s: the least trained tokens with kills / without that passes.
  double min_token_ratio = 0.95;
  bool baseline = true;  // also run the job without faults, for the comparison
  bool json = false;
  std::string out_dir;  // default runs/chaos-<time>
};

// `sluice chaos`: returns the process exit status (0 when every check held).
int run_chaos(const ChaosArgs& args, const std::string& sluice_exe,
              const std::vector<std::string>& environment);

// The checks on one finished (or failed) run folder; exposed for tests.
nlohmann::json chaos_checks(const std::string& run_dir, std::uint64_t expected_trajectories);

}  // namespace sluice::cli
