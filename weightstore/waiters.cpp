#include "weightstore/waiters.hpp"

#include <algorithm>
#include <utility>

namespace sluice::weightstore {

void Waiters::park(const std::string& identity, Millis wait, core::Responder responder,
                   Check check) {
  auto now = check(false);
  if (now) return responder.respond(std::move(*now));
  std::size_t& mine = per_identity_[identity];
  if (wait <= Millis(0) || mine >= limits_.per_identity || parked_.size() >= limits_.total) {
    if (mine == 0) per_identity_.erase(identity);
    return responder.respond(*check(true));
  }
  ++mine;
  const std::uint64_t id = next_id_++;
  auto deadline = loop_.after(std::min(wait, limits_.max_wait), [this, id] { answer(id, true); });
  parked_.emplace(id,
                  Parked{identity, std::move(responder), std::move(check), std::move(deadline)});
}

void Waiters::wake() {
  // Ids in order: an answer cannot park anything new meanwhile (answers only send).
  for (auto it = parked_.begin(); it != parked_.end();) {
    const std::uint64_t id = it->first;
    ++it;
    answer(id, false);
  }
}

void Waiters::answer(std::uint64_t id, bool final) {
  auto it = parked_.find(id);
  if (it == parked_.end()) return;
  auto reply = it->second.check(final);
  if (!reply) return;
  Parked p = std::move(it->second);
  parked_.erase(it);
  auto n = per_identity_.find(p.identity);
  if (n != per_identity_.end() && --n->second == 0) per_identity_.erase(n);
  p.responder.respond(std::move(*reply));
  // `p`'s deadline timer goes here, from its own callback when it is the one that fired: the
  // loop moves a one-shot timer's callback out before it runs it, so that is safe.
}

}  // namespace sluice::weightstore
