#include "sim/config.hpp"

#include <fmt/format.h>

#include <cmath>

namespace sluice::sim {

core::Status GpuType::validate() const {
  if (name.empty()) return core::invalid_argument("a GPU type needs a name");
  if (rollouts == 0)
    return core::invalid_argument(fmt::format("GPU type {}: rollouts must be at least 1", name));
  if (t0_ms < 0 || t1_ms < 0 || prefill_ms_per_token < 0 || t0_ms + t1_ms <= 0) {
    return core::invalid_argument(
        fmt::format("GPU type {}: times must not be negative, and a step must take time", name));
  }
  return {};
}

core::Status CpuModel::validate() const {
  for (double x : {cores, step_cpu_ms, report_cpu_ms, report_stall_ms, cpu_s_per_gb}) {
    if (!std::isfinite(x) || x < 0) {
      return core::invalid_argument("cpu: cores and every cost must be finite and >= 0");
    }
  }
  if (cores > 0 && cores < 0.01) return core::invalid_argument("cpu.cores must be 0 or >= 0.01");
  return {};
}

core::Status SimulateConfig::validate() const {
  if (gpus_per_rollout == 0) return core::invalid_argument("gpus_per_rollout must be at least 1");
  if (gpus_per_host == 0) return core::invalid_argument("gpus_per_host must be at least 1");
  if (broadcast != "chain" && broadcast != "tree") {
    return core::invalid_argument(
        fmt::format("broadcast must be chain or tree, not '{}'", broadcast));
  }
  if (fanout == 0) return core::invalid_argument("fanout must be at least 1");
  if (relay_holds != "whole" && relay_holds != "host-share") {
    return core::invalid_argument(
        fmt::format("relay_holds must be whole or host-share, not '{}'", relay_holds));
  }
  for (double r : {stage_gbps, trainer_gbps, link_gbps, wan_gbps, h2d_gbps, broadcast_gbps}) {
    if (!(r > 0)) return core::invalid_argument("every *_gbps rate must be positive");
  }
  if (!(local_gbps >= 0)) return core::invalid_argument("local_gbps must not be negative");
  if (!(digest_gbps_per_core >= 0) || !(sign_ms >= 0)) {
    return core::invalid_argument("digest_gbps_per_core and sign_ms must not be negative");
  }
  if ((trainer_digest_cores > 0 || relay_digest_cores > 0) && !(digest_gbps_per_core > 0)) {
    return core::invalid_argument(
        "trainer_digest_cores and relay_digest_cores need digest_gbps_per_core");
  }
  if (signing != "after-staging" && signing != "streamed") {
    return core::invalid_argument(
        fmt::format("signing must be after-staging or streamed, not '{}'", signing));
  }
  if (sign_batch_chunks == 0) return core::invalid_argument("sign_batch_chunks must be at least 1");
  if (!(device_sha256_gbps >= 0)) {
    return core::invalid_argument("device_sha256_gbps must not be negative");
  }
  if (device_threads == 0) return core::invalid_argument("device_threads must be at least 1");
  if (hop_latency_ms < 0) return core::invalid_argument("hop_latency_ms must not be negative");
  if (refresh_ms == 0) return core::invalid_argument("refresh_ms must be at least 1");
  if (!(max_sim_s > 0) || !(stall_s > 0)) {
    return core::invalid_argument("max_sim_s and stall_s must be positive");
  }
  if (steady_trim < 0 || steady_trim > 0.45) {
    return core::invalid_argument("steady_trim must be within 0 .. 0.45");
  }
  if (progress_s < 0) return core::invalid_argument("progress_s must not be negative");
  SLUICE_TRY(cpu.validate());
  return {};
}

std::vector<GpuType> rollout_timings(const SimInput& in) {
  GpuType engine;
  engine.name = "engine";
  engine.t0_ms = in.engine.t0_ms;
  engine.t1_ms = in.engine.t1_ms;
  engine.prefill_ms_per_token = in.engine.prefill_ms_per_token;
  std::vector<GpuType> out;
  out.reserve(in.rollouts);
  for (const GpuType& g : in.sim.gpu_types) {
    for (std::uint32_t k = 0; k < g.rollouts && out.size() < in.rollouts; ++k)
      out.push_back(g);
  }
  while (out.size() < in.rollouts)
    out.push_back(engine);
  return out;
}

}  // namespace sluice::sim
