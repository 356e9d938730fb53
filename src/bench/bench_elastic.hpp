// `sluice bench elastic`: a running job scaled up and down on emulated hosts (rate-limited links),
// once per design of where a joining rollout reads its first weights:
//
//   many     every holder the store names (the relays on every host, striped; the default)
//   trainer  the trainer's copy only: the master relay, which the trainer pushes each version
//            to (host 1, behind the same link as every relay)
//
// The job's relays sit on `hosts` emulated hosts (with its first rollouts); each joiner gets a host
// of its own besides (hosts.joiner_hosts), as a new machine joining a fleet would: it has no copy
// on its host, so every byte of its first version crosses links. In `trainer` the master relay's
// host link carries every joiner's copy; in `many` each joiner's own link is the bound and the
// holders' links add up.
//
// Each run starts `sluice run` with steps[0] rollouts (and identities for max(steps)), adds
// steps[1] - steps[0] rollouts at once with `sluice run --add`, waits until every joiner has
// finished a trajectory, removes steps[1] - steps[2] with `sluice run --remove` (SIGTERM: they
// hand their work back), and lets the job run to its end. It prints per design the joiners' time
// from the first request to first weights, from start to first weights and to first trajectory
// (median, max), what share of their bytes came from their own host, and the exactly-once check
// of the whole run (every trajectory consumed once, none lost, none twice); then the ratios
// between the designs. Needs root.
//
// The links, not this machine's cores, must set the pace: the bench samples /proc/stat every
// 200 ms and prints beside every figure how busy all cores were over the figure's window (mean and
// peak), from the last joiner's process start (every joiner up) to the last joiner's figure. A
// figure whose window was above kCpuBusyLimit (70%) busy at peak is marked as not a figure, and a
// ratio that needs it is refused ("refused: CPU 92.0% busy at peak ...") instead of printed. The
// wave's start-up (the joiners' processes starting at once, before their first requests) is
// printed on its own, and the load average at the start of the bench and of each design.
//
// Exit status: 0 done (every joiner joined, exactly-once held, the headline ratio admitted), 1 a
// run failed or a check did not hold, 2 bad arguments, 3 the headline ratio (first weights from
// the first request) was refused for the CPU, 77 not root.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::cli {

struct BenchElasticArgs {
  // Hosts with a relay (the holders); the joiners' hosts come on top, one each.
  std::uint32_t hosts = 6;
  // Slow enough, and versions small enough, that the links, not this machine's two cores, pace
  // both designs: a version crosses a link in 2.7 s (ten times a read's fixed costs), and 6
  // joiners at 25 Mbit/s each move under 20 MB/s through the kernel in the `many` wave. Measured
  // beside other jobs, the bench's own processes used at most 24% of the two cores in the `many`
  // figure's window at 25 Mbit/s with 8 MiB, 47% at 50 Mbit/s with 16 MiB; at 100-500 Mbit/s with
  // 32 MiB the cores were 93-100% busy through the wave.
  std::string link_rate = "25mbit";
  // Host 0's link (the store, the manager and the actor; "none": not limited). The control plane
  // shares it: shaped like the others, joiners reading from the actor queued the store's and the
  // manager's replies behind weights, and steps 5.4 s apart came 25-50 s apart. The trainer's copy
  // that the `trainer` design reads is the master relay, on host 1, behind link_rate.
  std::string trainer_link_rate = "none";
  std::string size = "8MiB";  // weight version size
  std::string steps = "2,8,3";
  std::string designs = "many,trainer";
  std::uint64_t prompts = 128;  // prompts in the job (group size 4)
  double timeout_s = 600;       // per design
  std::string out_dir;          // default runs/bench-elastic-<time>
  bool json = false;
};

int run_bench_elastic(const BenchElasticArgs& args, const std::vector<std::string>& environment);

}  // namespace sluice::cli
