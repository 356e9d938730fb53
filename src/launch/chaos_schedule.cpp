#include "launch/chaos_schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "launch/supervisor.hpp"

namespace sluice::cli {

namespace {

const std::set<std::string> kKillable = {"weightstore", "relay", "rollout-manager", "rollout",
                                         "actor"};

}  // namespace

std::vector<std::string> ChaosConfig::role_list() const {
  std::vector<std::string> out;
  std::stringstream ss(roles);
  for (std::string r; std::getline(ss, r, ',');) {
    if (!r.empty()) out.push_back(r);
  }
  return out;
}

core::Status ChaosConfig::validate() const {
  auto list = role_list();
  if (kills > 0 && list.empty()) return core::invalid_argument("roles: name at least one role");
  for (const auto& r : list) {
    if (!kKillable.count(r)) {
      return core::invalid_argument(fmt::format(
          "roles: unknown role '{}' (weightstore, relay, rollout-manager, rollout, actor)", r));
    }
  }
  if (every_s < 0 || first_s < 0 || window_s < 0) {
    return core::invalid_argument("every_s, first_s and window_s must not be negative");
  }
  if (after_version == 0) return core::invalid_argument("after_version must be at least 1");
  if (kills > 0 && every_s == 0 && window_s == 0) {
    return core::invalid_argument("kills at random times need window_s > 0 (or set every_s)");
  }
  return {};
}

ChaosSchedule::ChaosSchedule(const ChaosConfig& config, Supervisor& supervisor)
    : cfg_(config), sup_(&supervisor) {
  std::mt19937_64 rng(cfg_.seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (std::uint32_t k = 0; k < cfg_.kills; ++k) {
    // Every every_s seconds with a quarter of it as jitter, or anywhere in the window.
    double t = cfg_.every_s > 0 ? cfg_.first_s + cfg_.every_s * (k + 0.25 * u(rng))
                                : cfg_.first_s + cfg_.window_s * u(rng);
    times_.push_back(t);
    picks_.push_back(rng());
  }
  std::sort(times_.begin(), times_.end());
}

std::string ChaosSchedule::due(double elapsed) {
  if (next_ >= times_.size() || elapsed < times_[next_]) return "";
  // A random role first (each allowed role that the job has, equally likely), then a random
  // process of it: with 16 rollouts a process-uniform draw would kill almost only rollouts. If
  // the one drawn is down (restarting), the next one of that role goes instead, then the next
  // role's, so that every kill lands.
  std::vector<std::vector<Supervisor::Proc*>> by_role;
  for (const auto& role : cfg_.role_list()) {
    std::vector<Supervisor::Proc*> procs;
    for (auto& p : sup_->procs()) {
      if (p->spec.role == role) procs.push_back(p.get());
    }
    if (!procs.empty()) by_role.push_back(std::move(procs));
  }
  if (by_role.empty()) {
    next_ = times_.size();
    return "";
  }
  std::uint64_t draw = picks_[next_];
  std::size_t first_role = draw % by_role.size();
  for (std::size_t r = 0; r < by_role.size(); ++r) {
    const auto& procs = by_role[(first_role + r) % by_role.size()];
    std::size_t first = (draw / by_role.size()) % procs.size();
    for (std::size_t i = 0; i < procs.size(); ++i) {
      Supervisor::Proc* p = procs[(first + i) % procs.size()];
      if (p->state != Supervisor::State::kRunning || p->dying) continue;
      if (!sup_->kill(*p, fmt::format("chaos kill {} of {}", next_ + 1, times_.size())).is_ok()) {
        continue;
      }
      ++next_;
      return p->spec.name;
    }
  }
  return "";  // nothing up right now: the kill waits for the next turn
}

}  // namespace sluice::cli
