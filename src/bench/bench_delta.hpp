// `sluice bench delta`: how small and how fast bit-exact deltas between consecutive versions are
// (format/delta.hpp), and that they rebuild the version bit for bit.
//
// Two sources of version pairs, each printed as one row per pair:
// - synthetic: fp32 weights of --size bytes, and for each rate in --rates, a copy in which that
//   fraction of the elements took a small relative step (as one optimizer step does);
// - the real job (--job, default examples/grpo_arith.json, "none" to skip): the job's reference
//   GPT and learner run in this process, as its actor would: the supervised warm start, then
//   --updates on-policy GRPO updates (each on a batch the current weights generated, of the job's
//   size). The weights after each update are the version the actor would publish next, so each
//   pair of consecutive snapshots is a pair of consecutive published versions.
// With --dtype bf16 the job's versions are its fp32 weights rounded to bf16 (format/bf16.hpp), as
// the actor publishes them with publish_dtype bf16; the batches are still generated from the fp32
// weights (a bf16 job's rollouts generate from the rounded ones, which changes the trajectories,
// not how far one update moves the weights). After the job's rows, one line gives the median of
// full / delta over its pairs.
// Each row: the fraction of elements (4-byte words; bf16 versions: 2-byte values) changed, full
// bytes, delta bytes (the whole encoded blob: exactly the bytes a reader reads over the link),
// their ratio, encode and decode speed (MB of version per second, one thread) and whether the
// rebuilt version equals the target bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::cli {

struct BenchDeltaArgs {
  std::string size = "64MiB";  // synthetic versions
  std::string chunk = "4MiB";  // the versions' chunk size (the actor's default chunk_bytes)
  std::vector<double> rates = {0.01, 0.03};
  std::string job;  // "" : examples/grpo_arith.json beside the build tree; "none": skip
  std::vector<std::string> overrides;  // --set key=value on the job
  std::uint32_t updates = 3;           // consecutive pairs of the real job
  int level = 1;                       // zstd level
  std::string dtype = "f32";           // the job's versions: f32 or bf16
  std::string save_versions;           // folder for the job's versions (v<N>.bin), "" for none
  bool json = false;
};

int run_bench_delta(const BenchDeltaArgs& args);

}  // namespace sluice::cli
