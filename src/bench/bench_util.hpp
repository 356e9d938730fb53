// What the benches that start processes share.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/cpu_busy.hpp"  // CpuTimes, read_cpu_times (the benches that emulate links)
#include "core/status.hpp"
#include "launch/executable.hpp"  // self_exe, find_emuhosts
#include "rollout/sim_engine.hpp"
#include "wire/security.hpp"

namespace sluice::cli {

// The items of a comma-separated list ("sync,sluice"), empty ones left out.
std::vector<std::string> split_commas(const std::string& s);

// a / b, or 0 when b is not above 0 (a ratio of throughputs where one run produced nothing).
double ratio(double a, double b);

// A bench run's job keys (core::make_job_keys), authenticated as a job is, in a private folder
// of the temporary folder ("sluice-<tag>-keys-<pid>") that goes, with everything in it, with
// this object. Neither copyable nor movable: it owns the folder.
class BenchKeys {
 public:
  // Makes the keys of the store ("weightstore") and the publisher ("actor"), a key pair for each
  // of `others` (identity, role), and the members file; on failure the folder is removed and the
  // error returned.
  static core::Result<std::unique_ptr<BenchKeys>> make(
      const std::string& tag, const std::vector<std::pair<std::string, std::string>>& others);
  ~BenchKeys();
  BenchKeys(const BenchKeys&) = delete;
  BenchKeys& operator=(const BenchKeys&) = delete;

  const std::string& dir() const { return dir_; }
  // A member's security section: curve, its key file and the members file.
  core::SecurityConfig security(const std::string& identity) const;
  // The store's, as `sluice weightstore` arguments: --set store.security.key_file=... and
  // members_file.
  std::vector<std::string> store_sets() const;

 private:
  explicit BenchKeys(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

struct LengthCase {
  std::string name;
  rollout::LengthConfig lengths;
};

// The length distributions the repack benches compare repack on and off over (`sluice simulate
// --repack-bench`, `sluice bench e2e --repack-bench`): the job's own; lognormal with each of
// `spreads` as p99 / median (5, 10 and 20 by default) at the job's median (64 when the job's
// lengths are a file), its other fields (the cap) the job's, left out where it is the job's own;
// and each of `files` (one length per line).
std::vector<LengthCase> repack_bench_lengths(const rollout::LengthConfig& job,
                                             const std::vector<double>& spreads,
                                             const std::vector<std::string>& files);

}  // namespace sluice::cli
