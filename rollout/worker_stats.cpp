#include "rollout/worker_stats.hpp"

namespace sluice::rollout {

namespace {

double seconds(core::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

void WorkerStats::first_weights(core::Clock::time_point now) {
  started = now;
  first_weights_s = seconds(started - created);
  if (first_pull) first_read_s = seconds(started - *first_pull);
  barrier_s = idle_s = 0;
}

void WorkerStats::stepped(const StepResult& res, double took, std::uint32_t max_sequences,
                          core::Clock::time_point now) {
  ++steps;
  tokens += res.tokens;
  gen_s += took;
  occupancy_s += took * res.batch / max_sequences;
  if (!res.finished.empty() && first_trajectory_s < 0) first_trajectory_s = seconds(now - created);
}

nlohmann::json WorkerStats::to_json(core::Clock::time_point now, bool loaded,
                                    std::uint32_t max_sequences) const {
  // Time counts from the first version loaded: waiting for the job's first weights is start-up.
  const double wall = loaded ? seconds(now - started) : 0.0;
  return nlohmann::json{{"wall_s", wall},
                        {"gen_s", gen_s},
                        {"load_s", load_s},
                        {"barrier_s", barrier_s},
                        {"idle_s", idle_s},
                        {"occupancy_s", occupancy_s},
                        {"tokens", tokens},
                        {"steps", steps},
                        {"loads", loads},
                        {"imported", imported},
                        {"exported", exported},
                        {"reprefill_tokens", reprefill_tokens},
                        {"kv_imported", kv_imported},
                        {"kv_published", kv_published},
                        {"kv_fetched", kv_reads.fetched},
                        {"kv_fetched_bytes", kv_reads.fetched_bytes},
                        {"kv_read_failed", kv_reads.read_failed},
                        {"reprefill_s", reprefill_s},
                        {"pulled_bytes", pulled_bytes},
                        {"checksum_failures", checksum_failures},
                        {"pulled_checksum_only_bytes", pulled_checksum_only_bytes},
                        {"owner_unconfirmed", owner_unconfirmed},
                        {"pulled_same_host_bytes", pulled_same_host_bytes},
                        {"served_versions", served_versions},
                        {"refused_version", refused_version},
                        {"abandoned", abandoned},
                        {"env_wait_s", env_wait_s},
                        {"env_calls", env_calls},
                        {"env_failed", env_failed},
                        {"env_kv_kept", env_kv_kept},
                        {"env_reprefills", env_reprefills},
                        {"env_reprefill_tokens", env_reprefill_tokens},
                        {"env_overlong_lines", env_overlong_lines},
                        {"env_stalled", env_stalled},
                        {"env_garbage", env_garbage},
                        {"agent_unclaimed", agent_unclaimed},
                        {"created_unix", created_unix},
                        {"first_weights_s", first_weights_s},
                        {"first_read_s", first_read_s},
                        {"first_trajectory_s", first_trajectory_s},
                        {"max_sequences", max_sequences}};
}

}  // namespace sluice::rollout
