// The rollout manager's record of trajectories that are done: finished and acknowledged by the
// actor as durable. Their effect is in the trained weights, so the manager forgets everything
// else about them; this record only lets it tell a late copy (a duplicate) from new work. One of
// the parts ManagerState (rollout/manager_state.hpp) is composed of.
//
// The rules:
// - Ids are "p<N>/<k>" with k < group_size (rollout/protocol.hpp, parse_trajectory_id); another
//   id is never done.
// - The record is a floor and a set: every trajectory of every prompt below `floor()` is done,
//   and the set holds the done ones above it. When the set holds every member of the prompt at
//   the floor, they leave the set and the floor moves up. So the record grows with the work done
//   out of order (a long tail holding the floor while later prompts finish), not with the job's
//   length.
// - Adding an id twice, or one below the floor, changes nothing.
//
// Durability: the caller records each added id and the floor (ManagerChanges::done and the
// `done_floor` counter) and restores them with restore().
//
// Thread safety: none; ManagerState owns it on the manager's loop thread.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace sluice::rollout {

class DoneSet {
 public:
  explicit DoneSet(std::uint32_t group_size) : group_size_(group_size) {}

  // Takes back a floor and the done ids above it.
  void restore(std::uint64_t floor, const std::vector<std::string>& above);
  // Marks `id` done. True when it was not done before (and is a valid id).
  bool add(const std::string& id);
  bool contains(const std::string& id) const;
  // Every trajectory of prompts [0, floor) is done.
  std::uint64_t floor() const { return floor_; }
  // Done ids above the floor (what the record costs).
  std::size_t above() const { return above_.size(); }
  // Done members of prompt `p` (group_size for prompts below the floor).
  std::uint32_t done_in(std::uint64_t p) const;
  // Appends the state (floor, then the ids above it) to a digest's text.
  void describe(std::string& s) const;

 private:
  void advance();

  std::uint32_t group_size_;
  std::uint64_t floor_ = 0;
  std::set<std::pair<std::uint64_t, std::uint64_t>> above_;  // (prompt, member)
  // The same ids, hashed: contains() is asked for every trajectory of every report, and the
  // ordered set's lookups were a sixth of a long simulated job's time.
  struct PairHash {
    std::size_t operator()(const std::pair<std::uint64_t, std::uint64_t>& p) const {
      return std::hash<std::uint64_t>()(p.first * 0x9e3779b97f4a7c15ull ^ p.second);
    }
  };
  std::unordered_set<std::pair<std::uint64_t, std::uint64_t>, PairHash> members_;
};

}  // namespace sluice::rollout
