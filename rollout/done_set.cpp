// The manager's record of done trajectories: a floor and the done ids above it.
#include "rollout/done_set.hpp"

#include <fmt/format.h>

#include "rollout/protocol.hpp"

namespace sluice::rollout {

void DoneSet::restore(std::uint64_t floor, const std::vector<std::string>& above) {
  floor_ = floor;
  above_.clear();
  members_.clear();
  for (const auto& id : above)
    add(id);
}

bool DoneSet::add(const std::string& id) {
  auto ix = parse_trajectory_id(id);
  if (!ix || ix->second >= group_size_ || ix->first < floor_) return false;
  if (!above_.insert(*ix).second) return false;
  members_.insert(*ix);
  advance();
  return true;
}

bool DoneSet::contains(const std::string& id) const {
  auto ix = parse_trajectory_id(id);
  if (!ix || ix->second >= group_size_) return false;
  return ix->first < floor_ || members_.count(*ix) > 0;
}

std::uint32_t DoneSet::done_in(std::uint64_t p) const {
  if (p < floor_) return group_size_;
  auto lo = above_.lower_bound({p, 0});
  auto hi = above_.lower_bound({p + 1, 0});
  return static_cast<std::uint32_t>(std::distance(lo, hi));
}

// The set is ordered by (prompt, member): the floor's prompt is complete when its first
// group_size entries are (floor, 0) .. (floor, group_size - 1).
void DoneSet::advance() {
  while (!above_.empty() && above_.begin()->first == floor_) {
    if (done_in(floor_) < group_size_) return;
    const auto end = above_.lower_bound({floor_ + 1, 0});
    for (auto it = above_.begin(); it != end; ++it)
      members_.erase(*it);
    above_.erase(above_.begin(), end);
    ++floor_;
  }
}

void DoneSet::describe(std::string& s) const {
  s += fmt::format("done<{};", floor_);
  for (const auto& [p, k] : above_)
    s += fmt::format("p{}/{};", p, k);
}

}  // namespace sluice::rollout
