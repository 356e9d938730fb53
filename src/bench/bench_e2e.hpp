// `sluice bench e2e`: one workload, every mode, side by side in one run.
#pragma once

#include <string>
#include <vector>

#include "launch/job.hpp"

namespace sluice::cli {

struct BenchE2eArgs {
  std::string modes = "sync,one-step-off,stream,partial-rollout,sluice,sluice-norepack";
  std::string workload;                // a job file whose fields replace the defaults
  std::vector<std::string> overrides;  // --set key=value on the job
  std::uint32_t rollouts = 0;          // 0: the workload's
  std::uint64_t prompts = 0;           // 0: the workload's
  // Every mode this many times, in turn (mode order within each round); the table shows each
  // mode's median round and the ratios of medians, and a second table every round's tokens/s.
  std::uint32_t rounds = 1;
  // Also run each mode with the control plane in plain mode ("<mode>+plain"; the job's keys and
  // CURVE otherwise) and print authenticated / plain throughput per mode.
  bool compare_auth = false;
  // Steady throughput leaves out this share of the trained batches at each end (0 .. 0.45).
  double steady_trim = 0.1;
  bool json = false;
  // Instead of --modes: sluice against sluice-norepack on each length distribution of
  // repack_bench_lengths (bench/bench_util.hpp), the job's and `lengths` files, in turn each round.
  bool repack_bench = false;
  std::vector<std::string> lengths;        // --repack-bench: length files (one length per line)
  std::vector<double> spreads{5, 10, 20};  // --repack-bench: lognormal p99 / median ratios
};

// The default workload: a long tail with p99/median = 10, 16 rollouts.
JobConfig default_e2e_workload();

int run_bench_e2e(const BenchE2eArgs& args, const std::vector<std::string>& environment);

}  // namespace sluice::cli
