// `sluice bench elastic`: a running job scaled up and down on emulated hosts (rate-limited links),
// once per design of where a joining rollout reads its first weights:
//
//   many     every holder the store names (the relays on every host, striped; the default)
//   trainer  the trainer's copy only (the master relay, which the trainer pushes to and hands
//            off to, then the actor itself)
//
// Each run starts `sluice run` with steps[0] rollouts (and identities for max(steps)), adds
// steps[1] - steps[0] rollouts at once with `sluice run --add`, waits until every joiner has
// finished a trajectory, removes steps[1] - steps[2] with `sluice run --remove` (SIGTERM: they
// hand their work back), and lets the job run to its end. It prints per design the joiners' time
// from start to first weights and to first trajectory (median, max), what share of their bytes
// came from their own host, and the exactly-once check of the whole run (every trajectory
// consumed once, none lost, none twice); then the ratio between the designs. Needs root.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::cli {

struct BenchElasticArgs {
  std::uint32_t hosts = 16;
  // Slow enough that the links, not this machine's two cores, pace the trainer-only design.
  std::string link_rate = "500mbit";
  std::string size = "32MiB";  // weight version size
  std::string steps = "2,16,4";
  std::string designs = "many,trainer";
  std::uint64_t prompts = 480;  // prompts in the job (group size 4)
  double timeout_s = 900;       // per design
  std::string out_dir;          // default runs/bench-elastic-<time>
  bool json = false;
};

int run_bench_elastic(const BenchElasticArgs& args, const std::vector<std::string>& environment);

}  // namespace sluice::cli
