// What the benches that start processes share.
#pragma once

#include <string>
#include <vector>

namespace sluice::cli {

// The path of the running sluice executable (to start more of it).
std::string self_exe();

// scripts/emuhosts.sh: where SLUICE_EMUHOSTS in `environment` points, else beside the build tree
// (build/sluice -> scripts/). Empty when not found.
std::string find_emuhosts(const std::vector<std::string>& environment);

// The machine's CPU time so far (all cores, /proc/stat), to tell whether a benchmark that
// emulates links was paced by the links or by this machine's CPUs.
struct CpuTimes {
  unsigned long long busy = 0;   // jiffies not idle (user, nice, system, irq, softirq, steal)
  unsigned long long total = 0;  // all jiffies
};
CpuTimes read_cpu_times();
// The busy fraction of all cores between two readings (0 when nothing was counted).
double cpu_busy_fraction(const CpuTimes& before, const CpuTimes& after);

}  // namespace sluice::cli
