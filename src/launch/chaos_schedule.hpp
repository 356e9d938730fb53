// Random kills of a job's roles (the job file's `chaos` section): ChaosConfig says how many and
// when, ChaosSchedule draws the times and targets from the seed and carries them out through the
// supervisor as the job's time passes. `sluice chaos` (bench/chaos.hpp) checks the job survived.
//
// Thread safety: one thread (the launcher's).
#pragma once

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
  double first_s = 3;       // no kill before this many seconds after version after_version
  std::uint64_t after_version = 1;  // kill times count from this version's publication
  double window_s = 60;  // every_s 0: kills at uniformly random times in [first_s, +window_s]
  std::string roles = "weightstore,relay,rollout-manager,rollout,actor";  // which may be killed
  std::uint64_t seed = 1;  // the kill times and targets follow from it

  template <typename V>
  void describe(V& v) {
    v("kills", kills, "SIGKILL this many random roles during the job (0: none)");
    v("every_s", every_s, "one kill every this many seconds (0: random times in the window)");
    v("first_s", first_s, "no kill before this many seconds after after_version is published");
    v("after_version", after_version,
      "kill times count from the publication of this version (1: the first after the warm start)");
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

}  // namespace sluice::cli
