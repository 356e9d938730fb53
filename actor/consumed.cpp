#include "actor/consumed.hpp"

#include <utility>

namespace sluice::actor {

Consumed::Consumed(ConsumedOptions options)
    : options_(options), consumed_(options.group_size), durable_(options.group_size) {}

void Consumed::consume(const std::string& id, bool trained) {
  consumed_.insert(id);
  if (listed_.size() < options_.list_max) {
    listed_.push_back(id);
    if (trained) trained_.push_back(id);
  } else {
    complete_ = false;
  }
  if (options_.checkpoints) {
    unsynced_.push_back(id);
  } else {
    durable_.insert(id);
  }
}

std::vector<std::string> Consumed::synced() {
  for (const auto& id : unsynced_)
    durable_.insert(id);
  return std::exchange(unsynced_, {});
}

void Consumed::save(CheckpointState& s) const {
  s.consumed_group_size = consumed_.group_size();
  s.consumed_floor = consumed_.floor();
  s.consumed_listed = consumed_.listed();
  s.consumed_ids = listed_;
  s.trained_ids = trained_;
  s.ids_complete = complete_;
}

core::Status Consumed::restore(const CheckpointState& s) {
  if (s.consumed_group_size == 0) {
    // Format 1: consumed_ids lists every consumed id.
    IdSet set(options_.group_size);
    for (const auto& id : s.consumed_ids)
      set.insert(id);
    consumed_ = set;
  } else {
    auto set = IdSet::restore(s.consumed_group_size, s.consumed_floor, s.consumed_listed);
    if (!set.is_ok()) return core::data_loss("actor checkpoint: " + set.status().message());
    consumed_ = std::move(set).value();
  }
  durable_ = consumed_;
  unsynced_.clear();
  listed_ = s.consumed_ids;
  trained_ = s.trained_ids;
  complete_ = s.ids_complete && listed_.size() <= options_.list_max;
  return {};
}

}  // namespace sluice::actor
