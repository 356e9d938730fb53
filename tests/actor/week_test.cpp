// A simulated week: 300,000 versions of a tiny model published through the store's state machine,
// relayed, read and retired, and the actor's bookkeeping of 1.2 million trajectories, all in
// process with synthetic time (a version every 2 s: just under 7 days). What is measured is the
// size of the tables (entries, not bytes of RSS): after 100,000 versions and after 300,000 they
// must be the same, so memory is flat however long the job runs.
#include <doctest/doctest.h>

#include <deque>
#include <numeric>

#include "actor/checkpoint.hpp"
#include "actor/consumed.hpp"
#include "actor/experience_buffer.hpp"
#include "core/config.hpp"
#include "weightstore/store.hpp"

using namespace sluice;
using namespace sluice::weightstore;

namespace {

constexpr std::uint32_t kGroup = 2;
constexpr int kPromptsPerStep = 2;  // 4 trajectories a version

core::Manifest tiny(std::uint64_t version) {
  std::vector<std::uint8_t> bytes(64);
  std::iota(bytes.begin(), bytes.end(), static_cast<std::uint8_t>(version));
  core::TensorSpec t{"w", "F32", {16}, 0, 64};
  return core::make_manifest("m", version, {t}, bytes.data(), bytes.size(), 16).value();
}

HolderRegistration copy_of(const std::string& id, const core::Manifest& m,
                           std::vector<bool> chunks = {}) {
  HolderRegistration r;
  r.holder_id = id;
  r.endpoint = "tcp://127.0.0.1:1/" + id;
  r.descriptor = "desc-" + id;
  r.manifest = m;
  r.chunks = std::move(chunks);
  return r;
}

rl::Trajectory traj(std::uint64_t prompt, int sample, std::uint64_t version) {
  rl::Trajectory t;
  t.prompt_id = "p" + std::to_string(prompt);
  t.id = t.prompt_id + "/" + std::to_string(sample);
  t.version = version;
  t.versions = {version};
  t.response_tokens = {1};
  t.logprobs = {-0.5f};
  return t;
}

// What is measured at a point of the week.
struct Snapshot {
  WeightStore::Sizes store;
  std::size_t holders = 0;
  std::size_t seen_entries = 0;      // the buffer's id set, one by one
  std::size_t consumed_entries = 0;  // the actor's consumed set, one by one
  std::size_t held = 0;              // trajectories in the buffer
  std::size_t checkpoint_listed = 0;
  std::size_t checkpoint_bytes = 0;  // the checkpoint's body as written
};

class Week {
 public:
  // The store's defaults: keep 2, lease ttl 10 s, holder ttl 3 s, a lease's life 1 h; but caps
  // per identity smaller than the defaults (the tables are flat at any cap; these keep the week
  // quick).
  static StoreConfig config() {
    StoreConfig c;
    c.max_leases_per_identity = 32;
    c.max_pins_per_identity = 4;
    return c;
  }
  Week() : store_(config()), buffer_(buffer_options()), ledger_(ledger_options()) {
    REQUIRE(store_.join_relay("relay-1", {}, now_).is_ok());
  }

  // One version: published, relayed, read by a rollout, the old ones retired; one training step
  // on the trajectories that arrived.
  void step() {
    now_ += std::chrono::seconds(2);
    ++version_;
    const core::Manifest m = tiny(version_);
    must(store_.put_manifest(m));
    must(store_.register_holder(copy_of("actor", m), now_));
    // The relay pulls it from the actor, half and then all of it.
    auto src = store_.chain_source("m", version_, "relay-1", {});
    must(src.status());
    must(store_.register_holder(copy_of("relay-1", m, {true, true, false, false}), now_));
    must(store_.add_chunks("relay-1", "m", version_, {2, 3}, now_));
    // A rollout reads it under a lease and then serves it itself.
    auto plan = store_.plan("m", version_, {}, now_);
    must(plan.status());
    must(store_.register_holder(copy_of("rollout-0", m), now_));
    must(store_.release(plan->lease_id));
    // Every 1,000 versions a reader takes a lease and renews it for ever (a stuck or hostile
    // reader): lease_max_life ends it, so the copies it names drain.
    if (version_ % 1000 == 0) {
      auto stuck = store_.plan("m", version_, {}, now_);
      must(stuck.status());
      stuck_.push_back(stuck->lease_id);
    }
    for (auto it = stuck_.begin(); it != stuck_.end();) {
      it = store_.renew(*it, now_).is_ok() ? std::next(it) : stuck_.erase(it);
    }
    // A member that plans and pins every version and lets go of nothing, renewing every lease it
    // has (a bug or a hostile rollout): the store's caps per identity stop it.
    auto greedy = store_.plan("m", version_, {}, now_, kGreedy);
    if (greedy.is_ok())
      greedy_.push_back(greedy->lease_id);
    else
      exhausted(greedy.status());
    for (auto it = greedy_.begin(); it != greedy_.end();) {
      it = store_.renew(*it, now_, kGreedy).is_ok() ? std::next(it) : greedy_.erase(it);
    }
    exhausted(store_.pin("m", version_, kGreedy));
    // Each holder retires what it no longer serves: the actor the previous version (the relay
    // has this one), the rollout its previous one, the relay beyond the newest two.
    retire("actor", version_ - 1);
    retire("rollout-0", version_ - 1);
    if (version_ > 2) retire("relay-1", version_ - 2);
    // Holders ask whether their retired copies drained, and free those that did.
    for (auto it = retiring_.begin(); it != retiring_.end();) {
      auto d = store_.drained(it->first, "m", it->second);
      it = d.is_ok() && *d ? retiring_.erase(it) : std::next(it);
    }
    for (const char* h : {"actor", "relay-1", "rollout-0"})
      must(store_.heartbeat(h, now_));
    store_.expire(now_);
    train();
  }

  Snapshot snapshot() const {
    Snapshot s;
    s.store = store_.sizes();
    s.holders = store_.holder_count();
    s.seen_entries = buffer_.seen().entries();
    s.consumed_entries = ledger_.ids().entries();
    s.held = buffer_.held();
    actor::CheckpointState c;
    ledger_.save(c);
    s.checkpoint_listed = c.consumed_listed.size();
    s.checkpoint_bytes = core::config::to_json(c).dump().size();
    return s;
  }

  std::uint64_t version() const { return version_; }
  std::uint64_t consumed() const { return ledger_.count(); }
  std::uint64_t duplicates() const { return buffer_.counts().duplicates; }

 private:
  static actor::BufferOptions buffer_options() {
    actor::BufferOptions o;
    o.group_size = kGroup;
    o.max_staleness = 4;
    return o;
  }
  static actor::ConsumedOptions ledger_options() {
    actor::ConsumedOptions o;
    o.group_size = kGroup;
    o.checkpoints = true;
    o.list_max = 1000;  // the summary's lists are bounded by this by construction
    return o;
  }

  // Checked without an assertion per call: 300,000 versions make millions of calls.
  void must(const core::Status& s) {
    if (!s.is_ok()) FAIL(s.to_string());
  }
  // Ok, or refused at a cap.
  void exhausted(const core::Status& s) {
    if (!s.is_ok() && s.code() != core::Code::kResourceExhausted) FAIL(s.to_string());
  }

  static constexpr char kGreedy[] = "rollout-9";

  void retire(const std::string& holder, std::uint64_t v) {
    if (v == 0) return;
    must(store_.unpublish(holder, "m", v));
    retiring_.emplace_back(holder, v);
  }

  // Trajectories arrive out of order (each prompt's second sample a step late), and now and then
  // one twice (a retried send): the buffer refuses the copy, the ledger counts it once.
  void train() {
    for (int i = 0; i < kPromptsPerStep; ++i) {
      const std::uint64_t p = next_prompt_++;
      must(buffer_.add(traj(p, 0, version_)));
      late_.push_back(p);
    }
    while (late_.size() > kPromptsPerStep) {
      must(buffer_.add(traj(late_.front(), 1, version_)));
      if (late_.front() % 97 == 0) {
        CHECK(buffer_.add(traj(late_.front(), 1, version_)).code() == core::Code::kAlreadyExists);
      }
      late_.pop_front();
    }
    for (const auto& s : buffer_.take(64, version_))
      ledger_.consume(s.trajectory.id, true);
    for (const auto& id : buffer_.drain_dropped_ids())
      ledger_.consume(id, false);
    if (version_ % 10 == 0) {  // a checkpoint every 10 steps
      actor::CheckpointState c;
      ledger_.save(c);
      ledger_.synced();
    }
  }

  WeightStore store_;
  actor::ExperienceBuffer buffer_;
  actor::Consumed ledger_;
  Clock::time_point now_{};
  std::uint64_t version_ = 0;
  std::uint64_t next_prompt_ = 0;
  std::deque<std::uint64_t> late_;
  std::vector<std::uint64_t> stuck_;
  std::vector<std::uint64_t> greedy_;
  std::vector<std::pair<std::string, std::uint64_t>> retiring_;
};

void check_same(const Snapshot& a, const Snapshot& b) {
  CHECK(a.store.versions == b.store.versions);
  CHECK(a.store.copies == b.store.copies);
  CHECK(a.store.chunk_entries == b.store.chunk_entries);
  CHECK(a.store.leases == b.store.leases);
  CHECK(a.store.chain_reads == b.store.chain_reads);
  CHECK(a.store.deltas == b.store.deltas);
  CHECK(a.store.pins == b.store.pins);
  CHECK(a.holders == b.holders);
  CHECK(a.seen_entries == b.seen_entries);
  CHECK(a.consumed_entries == b.consumed_entries);
  CHECK(a.held == b.held);
  CHECK(a.checkpoint_listed == b.checkpoint_listed);
  // The floor's digits and the counts grow by a few characters; nothing grows with the ids.
  CHECK(b.checkpoint_bytes <= a.checkpoint_bytes + 16);
}

}  // namespace

TEST_SUITE("actor.week") {
  TEST_CASE("a week of versions leaves the store's and the actor's tables the same size") {
    Week w;
    while (w.version() < 100'000)
      w.step();
    const Snapshot at_100k = w.snapshot();
    while (w.version() < 300'000)
      w.step();
    const Snapshot at_300k = w.snapshot();
    check_same(at_100k, at_300k);
    // And small: the retained versions and the copies holders really hold, a stuck reader's
    // copies until its lease's longest life, the ids of the prompts in flight.
    MESSAGE("after 300,000 versions: " << at_300k.store.versions << " versions, "
                                       << at_300k.store.copies << " copies, "
                                       << at_300k.store.leases << " leases, "
                                       << at_300k.consumed_entries << " ids one by one");
    // The greedy member's pins and leases stop at its caps, and the versions and copies they
    // name stay as long as they do.
    const StoreConfig caps = Week::config();
    CHECK(at_300k.store.pins == caps.max_pins_per_identity);
    CHECK(at_300k.store.leases <= 2 + caps.max_leases_per_identity);
    CHECK(at_300k.store.versions < 20 + caps.max_pins_per_identity + caps.max_leases_per_identity);
    CHECK(at_300k.store.copies < 40 + 3 * caps.max_leases_per_identity);
    CHECK(at_300k.consumed_entries <= 2 * kPromptsPerStep);
    // All but the last step's prompts, whose second samples have not come.
    CHECK(w.consumed() == 4 * 300'000 - 2 * kPromptsPerStep);
    CHECK(w.duplicates() > 0);
  }
}
