// What the benches that start processes share.
#pragma once

#include <string>
#include <vector>

#include "bench/cpu_busy.hpp"     // CpuTimes, read_cpu_times (the benches that emulate links)
#include "launch/executable.hpp"  // self_exe, find_emuhosts
#include "rollout/sim_engine.hpp"

namespace sluice::cli {

// a / b, or 0 when b is not above 0 (a ratio of throughputs where one run produced nothing).
double ratio(double a, double b);

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
