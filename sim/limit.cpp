// The finite job's limit (the derivation is in sim/limit.hpp).
#include "sim/limit.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace sluice::sim {

namespace {

bool time_ok(double x) {
  return std::isfinite(x) && x >= 0;
}

core::Status check(const LimitJob& job) {
  if (job.groups.empty()) return core::invalid_argument("job limit: no groups");
  if (job.batch_groups == 0) return core::invalid_argument("job limit: batch_groups is 0");
  if (job.rollouts.empty()) return core::invalid_argument("job limit: no rollouts");
  for (const auto& g : job.groups) {
    if (g.empty()) return core::invalid_argument("job limit: an empty group");
    for (const auto& t : g) {
      if (!time_ok(t.wait_s)) return core::invalid_argument("job limit: a negative wait");
    }
  }
  for (const auto& r : job.rollouts) {
    if (r.max_sequences == 0) return core::invalid_argument("job limit: max_sequences is 0");
    if (!time_ok(r.t0_s) || !time_ok(r.t1_s) || !time_ok(r.prefill_s)) {
      return core::invalid_argument("job limit: a rollout's step or prefill time is negative");
    }
  }
  if (!time_ok(job.train_fixed_s) || !time_ok(job.train_s_per_token) || !time_ok(job.publish_s) ||
      !time_ok(job.first_weights_s)) {
    return core::invalid_argument("job limit: a negative training, publish or weights time");
  }
  return {};
}

}  // namespace

core::Result<JobLimit> job_limit(const LimitJob& job) {
  SLUICE_TRY(check(job));
  const double inf = std::numeric_limits<double>::infinity();

  // The fleet: its full-batch decode rate, and the fastest single step and prefill.
  double fleet = 0;           // sum_r rho_r, tokens/s
  double prefill_cost = inf;  // min_r rho_r prefill_r: decode tokens a prefill token costs
  double step1 = inf;         // min_r (t0_r + t1_r)
  double prefill_fast = inf;  // min_r prefill_r
  bool unbounded = false;     // a rollout that decodes a full batch in no time
  for (const auto& r : job.rollouts) {
    const double cap = r.max_sequences;
    const double step = r.t0_s + r.t1_s * cap;
    step1 = std::min(step1, r.t0_s + r.t1_s);
    prefill_fast = std::min(prefill_fast, r.prefill_s);
    if (!(step > 0)) {
      unbounded = true;
      continue;
    }
    fleet += cap / step;
    prefill_cost = std::min(prefill_cost, cap / step * r.prefill_s);
  }
  if (unbounded) prefill_cost = 0;  // its prefill aside, such a rollout bounds nothing

  // Per group: its time alone, its throughput cost, and its trained tokens.
  const std::size_t n = job.groups.size();
  std::vector<double> alone(n), cost(n);
  std::vector<std::uint64_t> trained(n);
  JobLimit out;
  for (std::size_t i = 0; i < n; ++i) {
    double slowest = 0, decode = 0, prefill = 0;
    std::uint64_t tokens = 0;
    for (const auto& t : job.groups[i]) {
      const double own = static_cast<double>(t.decode) * step1 +
                         static_cast<double>(t.prefill) * prefill_fast + t.wait_s;
      slowest = std::max(slowest, own);
      decode += static_cast<double>(t.decode);
      prefill += static_cast<double>(t.prefill);
      tokens += t.trained;
      out.decode_tokens += t.decode;
    }
    alone[i] = slowest;
    cost[i] = decode + prefill_cost * prefill;
    trained[i] = tokens;
    out.trained_tokens += tokens;
  }
  // Sorted, the m quickest groups are a prefix: the m-th smallest time alone, the smallest cost
  // sum; the most tokens k - 1 steps can hold are the largest groups' sums.
  std::sort(alone.begin(), alone.end());
  std::sort(cost.begin(), cost.end());
  std::sort(trained.begin(), trained.end(), std::greater<>());
  std::vector<double> cost_sum(n + 1, 0.0);
  std::vector<std::uint64_t> trained_sum(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    cost_sum[i + 1] = cost_sum[i] + cost[i];
    trained_sum[i + 1] = trained_sum[i] + trained[i];
  }
  const std::uint64_t batch = job.batch_groups;
  const std::uint64_t steps = (n + batch - 1) / batch;
  out.steps = steps;
  auto generate = [&](std::uint64_t groups) {
    const double through = unbounded || fleet <= 0 ? 0.0 : cost_sum[groups] / fleet;
    return std::max(alone[groups - 1], through);
  };
  auto train = [&](std::uint64_t k) {
    const std::uint64_t before = std::min<std::uint64_t>(n, (k - 1) * batch);
    const double tokens = static_cast<double>(out.trained_tokens - trained_sum[before]);
    return static_cast<double>(steps - k + 1) * job.train_fixed_s + job.train_s_per_token * tokens +
           static_cast<double>(steps - k) * job.publish_s;
  };
  for (std::uint64_t k = 1; k <= steps; ++k) {
    const double g = generate(std::min<std::uint64_t>(n, k * batch));
    const double t = train(k);
    const double wall = job.first_weights_s + g + t;
    if (wall > out.wall_s || k == 1) {
      out.wall_s = wall;
      out.binding_step = k;
      out.generate_s = g;
      out.train_s = t;
    }
  }
  out.generate_all_s = unbounded || fleet <= 0 ? 0.0 : cost_sum[n] / fleet;
  out.train_all_s = train(1);
  out.longest_s = alone[n - 1];
  out.fleet_tokens_per_s = unbounded ? inf : fleet;
  return out;
}

}  // namespace sluice::sim
