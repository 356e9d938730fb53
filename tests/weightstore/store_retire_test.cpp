// Retirement: what the store forgets, so that a week-long job's store stays the same size.
#include <doctest/doctest.h>

#include <numeric>

#include "weightstore/store.hpp"

using namespace sluice;
using namespace sluice::weightstore;
using core::Code;

namespace {

core::Manifest manifest(std::uint64_t version) {
  std::vector<std::uint8_t> bytes(64);
  std::iota(bytes.begin(), bytes.end(), static_cast<std::uint8_t>(version));
  core::TensorSpec t{"w", "F32", {16}, 0, 64};
  return core::make_manifest("m", version, {t}, bytes.data(), bytes.size(), 16).value();
}

HolderRegistration copy_of(const std::string& id, const core::Manifest& m) {
  HolderRegistration r;
  r.holder_id = id;
  r.endpoint = "tcp://127.0.0.1:1/" + id;
  r.descriptor = "desc-" + id;
  r.manifest = m;
  return r;
}

const Clock::time_point t0{};

StoreConfig config() {
  StoreConfig c;
  c.keep_versions = 2;
  c.holder_ttl = Millis(1000);
  c.lease_ttl = Millis(100);
  c.lease_max_life = Millis(1000);
  return c;
}

// Versions 1..n published by "actor", each committed.
void publish(WeightStore& s, std::uint64_t n, Clock::time_point now) {
  for (std::uint64_t v = 1; v <= n; ++v) {
    REQUIRE(s.put_manifest(manifest(v)).is_ok());
    REQUIRE(s.register_holder(copy_of("actor", manifest(v)), now).is_ok());
  }
}

}  // namespace

TEST_SUITE("weightstore.store") {
  TEST_CASE("a retired version is erased once nothing names it, and stays gone") {
    WeightStore s(config());
    publish(s, 4, t0);
    auto lease = s.plan("m", 2, {}, t0);  // a reader still reading version 2
    REQUIRE(lease.is_ok());
    for (std::uint64_t v : {1, 2})
      REQUIRE(s.unpublish("actor", "m", v).is_ok());
    CHECK(s.drained("actor", "m", 1).value());
    CHECK_FALSE(s.drained("actor", "m", 2).value());
    s.expire(t0 + Millis(50));
    // Drained copies stay answerable for a lease time-to-live: the holder asks meanwhile.
    CHECK(s.drained("actor", "m", 1).value());
    CHECK(s.copies("m", 1).size() == 1);
    REQUIRE(s.renew(lease->lease_id, t0 + Millis(150)).is_ok());  // the reader goes on
    s.expire(t0 + Millis(200));
    REQUIRE(s.heartbeat("actor", t0 + Millis(200)).is_ok());
    CHECK(s.copies("m", 1).empty());
    CHECK_FALSE(s.knows("m", 1));
    // Version 2 is leased, so its copy and manifest stay.
    CHECK(s.knows("m", 2));
    CHECK(s.copies("m", 2).size() == 1);
    REQUIRE(s.release(lease->lease_id).is_ok());
    s.expire(t0 + Millis(210));
    s.expire(t0 + Millis(400));
    CHECK_FALSE(s.knows("m", 2));
    CHECK(s.sizes().versions == 2);
    CHECK(s.sizes().copies == 2);
    // Late messages about an erased version: not_found, and nothing comes back.
    const std::string before = s.state_digest();
    CHECK(s.drained("actor", "m", 1).status().code() == Code::kNotFound);
    CHECK(s.unpublish("actor", "m", 1).code() == Code::kNotFound);
    CHECK(s.plan("m", 1, {}, t0 + Millis(400)).status().code() == Code::kNotFound);
    CHECK(s.pin("m", 1, "gen").code() == Code::kNotFound);
    CHECK(s.add_chunks("actor", "m", 2, {0}, t0 + Millis(400)).code() == Code::kNotFound);
    auto late = s.register_holder(copy_of("relay-1", manifest(1)), t0 + Millis(400));
    CHECK(late.code() == Code::kNotFound);
    CHECK(late.message().find("erased") != std::string::npos);
    CHECK(s.state_digest() == before);
    CHECK(s.latest("m").value() == 4);
  }

  TEST_CASE("a holder still serving a retired version keeps it readable") {
    WeightStore s(config());
    publish(s, 1, t0);
    REQUIRE(s.register_holder(copy_of("rollout-0", manifest(1)), t0).is_ok());
    REQUIRE(s.put_manifest(manifest(2)).is_ok());
    REQUIRE(s.register_holder(copy_of("actor", manifest(2)), t0).is_ok());
    REQUIRE(s.put_manifest(manifest(3)).is_ok());
    REQUIRE(s.register_holder(copy_of("actor", manifest(3)), t0).is_ok());
    REQUIRE(s.unpublish("actor", "m", 1).is_ok());
    for (int ms : {0, 200, 400}) {
      REQUIRE(s.heartbeat("rollout-0", t0 + Millis(ms)).is_ok());
      REQUIRE(s.heartbeat("actor", t0 + Millis(ms)).is_ok());
      s.expire(t0 + Millis(ms));
    }
    CHECK(s.retained("m").count(1) == 0);
    auto p = s.plan("m", 1, {}, t0 + Millis(400));
    REQUIRE(p.is_ok());
    REQUIRE(p->holders.size() == 1);
    CHECK(p->holders[0].holder_id == "rollout-0");
  }

  TEST_CASE("a lease lives at most lease_max_life, however often it is renewed") {
    WeightStore s(config());
    publish(s, 3, t0);
    auto lease = s.plan("m", 3, {}, t0);
    REQUIRE(lease.is_ok());
    REQUIRE(s.unpublish("actor", "m", 3).is_ok());
    Clock::time_point now = t0;
    for (; now < t0 + Millis(1000); now += Millis(50)) {
      REQUIRE(s.renew(lease->lease_id, now).is_ok());
      REQUIRE(s.heartbeat("actor", now).is_ok());
      s.expire(now);
      REQUIRE_FALSE(s.drained("actor", "m", 3).value());
    }
    auto late = s.renew(lease->lease_id, now);
    CHECK(late.code() == Code::kNotFound);
    CHECK(late.message().find("longest life") != std::string::npos);
    CHECK(s.drained("actor", "m", 3).value());
    // Never renewed past the deadline either: a lease granted now expires by then.
    auto l2 = s.plan("m", 2, {}, now);
    REQUIRE(l2.is_ok());
    REQUIRE(s.renew(l2->lease_id, now + Millis(990)).is_ok());
    s.expire(now + Millis(1001));
    CHECK(s.renew(l2->lease_id, now + Millis(1001)).code() == Code::kNotFound);
  }

  TEST_CASE("an uncommitted version a killed publisher left behind is erased") {
    WeightStore s(config());
    publish(s, 1, t0);
    REQUIRE(s.put_manifest(manifest(2)).is_ok());  // the publisher died here
    REQUIRE(s.put_manifest(manifest(3)).is_ok());
    REQUIRE(s.register_holder(copy_of("actor", manifest(3)), t0).is_ok());
    s.expire(t0);
    CHECK(s.knows("m", 2));  // one newer commit: it may be a slow publish still
    REQUIRE(s.put_manifest(manifest(4)).is_ok());
    REQUIRE(s.register_holder(copy_of("actor", manifest(4)), t0).is_ok());
    s.expire(t0);
    CHECK_FALSE(s.knows("m", 2));  // older than every version retention keeps
    CHECK(s.knows("m", 1));        // not retained, but the actor still serves it
    CHECK(s.register_holder(copy_of("actor", manifest(2)), t0).code() == Code::kNotFound);
  }

  TEST_CASE("a restarted store learns versions back from holders, erased ones included") {
    // The erased mark is soft state, like the rest: a new store knows nothing to refuse.
    WeightStore s(config());
    auto r = copy_of("rollout-0", manifest(1));
    r.again = true;
    CHECK(s.register_holder(r, t0).is_ok());
    CHECK(s.committed("m", 1));
  }

  TEST_CASE("one identity's leases stop at its cap, and another's and plain mode's do not") {
    StoreConfig c = config();
    c.max_leases_per_identity = 3;
    WeightStore s(c);
    publish(s, 2, t0);
    std::vector<std::uint64_t> mine;
    for (int i = 0; i < 3; ++i)
      mine.push_back(s.plan("m", 2, {}, t0, "rollout-1").value().lease_id);
    const auto before = s.state_digest();
    auto refused = s.plan("m", 2, {}, t0, "rollout-1");
    CHECK(refused.status().code() == Code::kResourceExhausted);
    CHECK(refused.status().message().find("rollout-1 holds 3 leases") != std::string::npos);
    CHECK(s.delta_plan("m", 1, 2, {}, t0, "rollout-1").status().code() == Code::kResourceExhausted);
    CHECK(s.state_digest() == before);  // nothing was granted
    CHECK(s.sizes().leases == 3);
    CHECK(s.plan("m", 2, {}, t0, "rollout-2").is_ok());
    for (int i = 0; i < 5; ++i)
      CHECK(s.plan("m", 2, {}, t0).is_ok());  // plain mode: leases expire with lease_ttl
    // One released: room for one more. All expired: room again.
    REQUIRE(s.release(mine[0], "rollout-1").is_ok());
    CHECK(s.plan("m", 2, {}, t0, "rollout-1").is_ok());
    CHECK(s.plan("m", 2, {}, t0, "rollout-1").status().code() == Code::kResourceExhausted);
    s.expire(t0 + Millis(500));
    CHECK(s.sizes().leases == 0);
    CHECK(s.active_leases("actor") == 0);
    CHECK(s.plan("m", 2, {}, t0 + Millis(500), "rollout-1").is_ok());
    CHECK(s.active_leases("actor") == 1);
  }

  TEST_CASE("one identity's pins stop at its cap, and are cleared with its holder") {
    StoreConfig c = config();
    c.max_pins_per_identity = 2;
    WeightStore s(c);
    publish(s, 4, t0);
    REQUIRE(s.register_holder(copy_of("rollout-1", manifest(4)), t0, "rollout-1").is_ok());
    REQUIRE(s.pin("m", 1, "rollout-1").is_ok());
    REQUIRE(s.pin("m", 2, "rollout-1").is_ok());
    CHECK(s.pin("m", 2, "rollout-1").is_ok());  // pinned already: no second pin
    const auto before = s.state_digest();
    CHECK(s.pin("m", 3, "rollout-1").code() == Code::kResourceExhausted);
    CHECK(s.state_digest() == before);
    REQUIRE(s.pin("m", 3, "rollout-2").is_ok());  // another identity's own cap
    CHECK(s.retained("m") == std::set<std::uint64_t>{1, 2, 3, 4});
    s.unpin("m", 1, "rollout-1");
    REQUIRE(s.pin("m", 3, "rollout-1").is_ok());
    CHECK(s.sizes().pins == 3);
    // rollout-1's holder stops beating: its pins go with it; rollout-2 has no holder and keeps its
    // pin (bounded by its cap).
    REQUIRE(s.heartbeat("actor", t0 + Millis(1500)).is_ok());
    s.expire(t0 + Millis(1500));
    CHECK(s.holder_count() == 1);
    CHECK(s.sizes().pins == 1);
    CHECK(s.retained("m") == std::set<std::uint64_t>{3, 4});
    REQUIRE(s.pin("m", 4, "rollout-1").is_ok());  // its count went with them
    REQUIRE(s.pin("m", 3, "rollout-1").is_ok());
  }

  TEST_CASE("a holder's copy drains when its last lease goes, however many leases others hold") {
    WeightStore s(config());
    publish(s, 2, t0);
    REQUIRE(s.register_holder(copy_of("relay-0", manifest(2)), t0).is_ok());
    std::vector<std::uint64_t> leases;
    for (int i = 0; i < 50; ++i)
      leases.push_back(s.plan("m", 2, {}, t0).value().lease_id);
    REQUIRE(s.unpublish("actor", "m", 2).is_ok());
    CHECK(s.active_leases("actor") == 50);
    CHECK_FALSE(s.drained("actor", "m", 2).value());
    for (auto id : leases)
      REQUIRE(s.release(id).is_ok());
    CHECK(s.active_leases("actor") == 0);
    CHECK(s.active_leases("relay-0") == 0);
    CHECK(s.drained("actor", "m", 2).value());
  }
}
