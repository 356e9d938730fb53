// `sluice simulate JOB.json`: the job in simulated time, once per mode, side by side
// (sim/simulator.hpp says what is real code and what is modelled).
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "launch/job.hpp"
#include "sim/config.hpp"
#include "sim/simulator.hpp"

namespace sluice::cli {

// The modes `sluice simulate` runs when --modes is not given, and those of --scale: the peers
// sluice is judged against there, the stronger sync (colocated) and partial-rollout as its users
// run it (partial-broadcast) among them. --scale adds the limit and steady-limit rows to any list.
inline constexpr const char* kSimulateModes =
    "sync,one-step-off,stream,partial-rollout,sluice,sluice-norepack";
inline constexpr const char* kScaleModes =
    "sync,sync-colocated,one-step-off,stream,partial-rollout,partial-broadcast,sluice";

struct SimulateArgs {
  // JOB.json files with an optional `simulate` section: exactly one, except with --scale (any
  // number; none: kScaleJobs) and --validate (none: it builds bench e2e's workloads).
  std::vector<std::string> jobs;
  bool scale = false;          // every mode on each job, one table of ratios (simulate_scale.cpp)
  bool validate = false;       // bench e2e's configurations, simulated against measured
  std::string measured;        // --validate: bench e2e --json lines of the one-host run
  std::string measured_hosts;  // --validate: ... of the four-emulated-host run
  bool update_only = false;    // the weight-movement model's time for one update, nothing else
  std::string modes;           // comma-separated; empty: kSimulateModes, with --scale kScaleModes
  std::vector<std::string> overrides;  // --set key=value on the job
  bool json = false;
  // --scale: the trainer's shares of each cluster's GPUs to run every mode at, comma-separated,
  // each in (0, 1) (empty: each file's own split); each mode is reported at its best.
  std::string splits;
  // --repack-bench: sluice against sluice-norepack on the job's length distribution, on
  // lognormals with p99/median 5, 10 and 20 (the job's median), and on each length file in
  // `lengths`; prints the on/off ratio per distribution.
  bool repack_bench = false;
  std::vector<std::string> lengths;
  std::vector<double> spreads{5, 10, 20};  // --repack-bench: lognormal p99 / median ratios
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

// The Laminar-like setups `--scale` runs when given no job files (examples/scale/README.md).
inline const std::vector<std::string> kScaleJobs = {"examples/scale/laminar_7b_64gpu.json",
                                                    "examples/scale/laminar_32b_256gpu.json",
                                                    "examples/scale/laminar_72b_1024gpu.json"};

// Reads JOB.json (with overrides) into the simulator's input.
core::Result<sim::SimInput> load_simulation(const std::string& path,
                                            const std::vector<std::string>& overrides);
// The simulator's input for a settled job and a simulate section.
sim::SimInput simulation_input(const JobConfig& job, const sim::SimulateConfig& simulate);
// The same cluster (rollouts x gpus_per_rollout + simulate.trainer_gpus) with `trainer_share` of
// its GPUs training and the rest generating in rollouts of gpus_per_rollout: the rollout count
// rounds down, the trainer takes the remainder, and the training time a token scales with
// 1 / trainer GPUs (actor.train_ms_per_token x trainer_gpus is one GPU's; train_ms_fixed stays).
// Errors: trainer_gpus unset (0), gpu_types set, or a share leaving either side no GPU.
core::Result<sim::SimInput> split_input(const sim::SimInput& in, double trainer_share);
// The input of sync-colocated: every GPU of the cluster generates and every GPU trains.
core::Result<sim::SimInput> colocated_input(const sim::SimInput& in);
// Parses --splits: comma-separated numbers, each in (0, 1), none twice.
core::Result<std::vector<double>> parse_splits(const std::string& list);
// Parses a comma-separated mode list, checking each name (errors name the offending mode).
core::Result<std::vector<std::string>> parse_sim_modes(const std::string& modes);
// Every mode of `modes` on `in`, in order (progress lines to stderr unless `quiet`).
core::Result<std::vector<sim::ModeResult>> simulate_modes(const sim::SimInput& in,
                                                          const std::vector<std::string>& modes,
                                                          bool quiet);

// The rows of `bench e2e --json` output by mode (`where` names the run in errors). Its summary
// line ({"runs": N, "exactly_once_failed": F}) is no row: F > 0 is an error (a run lost or
// doubled a trajectory, so its figures are no reference).
core::Result<std::map<std::string, nlohmann::json>> parse_bench_e2e_rows(const std::string& text,
                                                                         const std::string& where);

// One line describing the simulated job (rollouts, GPUs, prompts, lengths, version size).
void print_job_line(const sim::SimInput& input);

int run_simulate(const SimulateArgs& args);
// simulate_scale.cpp: --scale, --validate, --update-only.
int run_simulate_scale(const SimulateArgs& args);
int run_simulate_validate(const SimulateArgs& args);
int run_simulate_update(const SimulateArgs& args);

}  // namespace sluice::cli
