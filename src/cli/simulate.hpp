// `sluice simulate JOB.json`: the job in simulated time, once per mode, side by side
// (sim/simulator.hpp says what is real code and what is modelled).
#pragma once

#include <string>
#include <vector>

#include "cli/job.hpp"
#include "core/status.hpp"
#include "sim/config.hpp"

namespace sluice::cli {

struct SimulateArgs {
  std::string job;  // JOB.json: a job file with an optional `simulate` section
  std::string modes = "sync,one-step-off,stream,partial-rollout,sluice,sluice-norepack";
  std::vector<std::string> overrides;  // --set key=value on the job
  bool json = false;
  // --repack-bench: sluice against sluice-norepack on the job's length distribution, on
  // lognormals with p99/median 5, 10 and 20 (the job's median), and on each length file in
  // `lengths`; prints the on/off ratio per distribution.
  bool repack_bench = false;
  std::vector<std::string> lengths;
};

// A job file for the simulator: the job's own keys and `simulate`. Unknown keys anywhere are
// errors naming their path, as for every configuration.
struct SimulateJob {
  JobConfig job;
  sim::SimulateConfig simulate;

  template <typename V>
  void describe(V& v) {
    job.describe(v);
    v("simulate", simulate, "sluice simulate: GPUs, hosts, datacenters, link rates, GPU types");
  }
};

// Reads JOB.json (with overrides) into the simulator's input.
core::Result<sim::SimInput> load_simulation(const std::string& path,
                                            const std::vector<std::string>& overrides);

int run_simulate(const SimulateArgs& args);

}  // namespace sluice::cli
