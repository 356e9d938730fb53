// A set of trajectory ids that stays small in a long job. The rollout manager issues ids of one
// form, "p<prompt>/<sample>" (rollout/manager_state.cpp): prompts are numbered from 0 in the
// order they are released, and each has group_size samples. Below a floor every sample of every
// prompt is in the set, so only the ids at or above the floor are kept one by one. The manager
// releases prompts in order and only a bounded number ahead of what the actor consumed, so the
// floor follows the job and what is kept one by one stays about the size of that window.
//
// The set is exact: contains() is true only for ids insert()ed, whatever arrives. An id of
// another form (a non-canonical number such as "p01/0", a sample >= group_size, a name from a
// test) is kept one by one, as a plain set would. So the exactly-once checks built on it (the
// experience buffer's, the actor's checkpoint) mean what they meant with every id listed.
//
// Thread safety: none (a value type).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace sluice::actor {

class IdSet {
 public:
  // group_size 0 counts as 1.
  explicit IdSet(std::uint32_t group_size = 1);

  // Adds `id`; returns whether it was not in the set already.
  bool insert(const std::string& id);
  bool contains(const std::string& id) const;

  std::uint32_t group_size() const { return group_size_; }
  // Every sample of every prompt below floor() is in the set.
  std::uint64_t floor() const { return floor_; }
  // Ids in the set.
  std::uint64_t size() const { return size_; }
  // Ids kept one by one (what the set's memory and its saved form grow with).
  std::size_t entries() const;

  // The saved form: the floor and the ids kept one by one (for a checkpoint).
  std::vector<std::string> listed() const;
  // The set saved as (group_size, floor, listed). invalid_argument when `listed` holds an id
  // below the floor (such a set was not written by listed()).
  static core::Result<IdSet> restore(std::uint32_t group_size, std::uint64_t floor,
                                     const std::vector<std::string>& listed);

 private:
  void advance();

  std::uint32_t group_size_;
  std::uint64_t floor_ = 0;
  std::uint64_t size_ = 0;
  std::map<std::uint64_t, std::vector<bool>> above_;  // prompt -> samples in the set
  std::set<std::string> other_;                       // ids of any other form
};

}  // namespace sluice::actor
