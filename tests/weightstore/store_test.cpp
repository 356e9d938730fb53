#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "format/shard.hpp"
#include "weightstore/store.hpp"

using namespace sluice;
using namespace sluice::weightstore;
using core::Code;

namespace {

// A manifest of one F32 tensor of `floats` elements, chunked by `chunk` bytes.
core::Manifest manifest(std::uint64_t version, std::uint64_t floats = 1024,
                        std::uint64_t chunk = 1024, const std::string& model = "m") {
  std::vector<std::uint8_t> bytes(floats * 4);
  std::iota(bytes.begin(), bytes.end(), static_cast<std::uint8_t>(version));
  core::TensorSpec t{"w", "F32", {floats}, 0, floats * 4};
  return core::make_manifest(model, version, {t}, bytes.data(), bytes.size(), chunk).value();
}

HolderRegistration holder(const std::string& id, const core::Manifest& m, Topology topo = {},
                          std::vector<bool> chunks = {}) {
  HolderRegistration r;
  r.holder_id = id;
  r.endpoint = "tcp://127.0.0.1:1/" + id;
  r.descriptor = "desc-" + id;
  r.topology = std::move(topo);
  r.manifest = m;
  r.chunks = std::move(chunks);
  return r;
}

const Clock::time_point t0{};

}  // namespace

TEST_SUITE("weightstore.store") {
  TEST_CASE("a version is committed only once one holder has every chunk") {
    WeightStore s;
    auto m = manifest(1);  // 4 chunks
    REQUIRE(s.put_manifest(m).is_ok());
    CHECK(s.latest("m").status().code() == Code::kNotFound);
    REQUIRE(s.register_holder(holder("a", m, {}, {true, true, false, false}), t0).is_ok());
    REQUIRE(s.register_holder(holder("b", m, {}, {false, false, true, true}), t0).is_ok());
    // Between them a and b have every chunk, but no one holder does.
    CHECK_FALSE(s.committed("m", 1));
    CHECK(s.plan("m", 1, {}, t0).status().code() == Code::kFailedPrecondition);
    REQUIRE(s.add_chunks("a", "m", 1, {2}, t0).is_ok());
    CHECK_FALSE(s.committed("m", 1));
    REQUIRE(s.add_chunks("a", "m", 1, {3}, t0).is_ok());
    CHECK(s.committed("m", 1));
    CHECK(s.latest("m").value() == 1);
    CHECK(s.add_chunks("a", "m", 1, {9}, t0).code() == Code::kInvalidArgument);
  }

  TEST_CASE("latest never goes backwards and versions only increase") {
    WeightStore s;
    auto m1 = manifest(1), m2 = manifest(2), m3 = manifest(3);
    REQUIRE(s.put_manifest(m1).is_ok());
    REQUIRE(s.put_manifest(m2).is_ok());
    REQUIRE(s.register_holder(holder("a", m2), t0).is_ok());
    CHECK(s.latest("m").value() == 2);
    REQUIRE(s.register_holder(holder("b", m1), t0).is_ok());  // an older version commits late
    CHECK(s.committed("m", 1));
    CHECK(s.latest("m").value() == 2);
    REQUIRE(s.put_manifest(m3).is_ok());
    CHECK(s.put_manifest(manifest(2)).is_ok());  // the same manifest again is harmless
    CHECK(s.put_manifest(manifest(2, 2048)).code() == Code::kAlreadyExists);
    CHECK(s.put_manifest(manifest(0)).code() == Code::kInvalidArgument);
    WeightStore t;
    REQUIRE(t.put_manifest(m3).is_ok());
    CHECK(t.put_manifest(m2).code() == Code::kFailedPrecondition);
  }

  TEST_CASE("read plans rank holders by topology, then by load, and name only verified chunks") {
    WeightStore s;
    auto m = manifest(1);
    REQUIRE(s.put_manifest(m).is_ok());
    Topology reader{"h1", "r1", "dc1"};
    REQUIRE(s.register_holder(holder("remote", m, {"h9", "r9", "dc2"}), t0).is_ok());
    REQUIRE(s.register_holder(holder("same-dc", m, {"h3", "r2", "dc1"}), t0).is_ok());
    REQUIRE(s.register_holder(holder("same-rack", m, {"h2", "r1", "dc1"}), t0).is_ok());
    REQUIRE(s.register_holder(
                 holder("same-host", m, {"h1", "r1", "dc1"}, {true, false, false, false}), t0)
                .is_ok());
    auto p = s.plan("m", 0, reader, t0);
    REQUIRE(p.is_ok());
    CHECK(p->manifest.version == 1);
    auto names = [&](std::size_t chunk) {
      std::vector<std::string> out;
      for (auto i : p->chunks[chunk].holders)
        out.push_back(p->holders[i].holder_id);
      return out;
    };
    CHECK(names(0) == std::vector<std::string>{"same-host", "same-rack", "same-dc", "remote"});
    CHECK(names(1) == std::vector<std::string>{"same-rack", "same-dc", "remote"});

    // Among equals, the least loaded comes first.
    WeightStore f;
    REQUIRE(f.put_manifest(m).is_ok());
    REQUIRE(f.register_holder(holder("x", m), t0).is_ok());
    auto only_x = f.plan("m", 1, {}, t0);  // x's load becomes 1
    REQUIRE(only_x.is_ok());
    REQUIRE(f.register_holder(holder("y", m), t0).is_ok());
    auto next = f.plan("m", 1, {}, t0);
    REQUIRE(next.is_ok());
    CHECK(next->holders[next->chunks[0].holders[0]].holder_id == "y");
  }

  TEST_CASE("a store that does not know a holder answers unknown, never drained") {
    // As after a restart: the holder's readers may still hold leases the new store never saw.
    WeightStore s;
    auto d = s.drained("gone", "m", 1);
    REQUIRE_FALSE(d.is_ok());
    CHECK(d.status().code() == Code::kNotFound);
  }

  TEST_CASE(
      "a restarted store: an unknown copy is unknown, a re-registered one waits a lease ttl") {
    StoreConfig cfg;
    cfg.lease_ttl = Millis(1000);
    WeightStore s(cfg);
    auto m2 = manifest(2);
    // The holder comes back with version 2 only; version 1 is the copy it is retiring.
    auto again = holder("a", m2);
    again.again = true;
    REQUIRE(s.register_holder(again, t0).is_ok());
    auto d1 = s.drained("a", "m", 1);
    REQUIRE_FALSE(d1.is_ok());
    CHECK(d1.status().code() == Code::kNotFound);
    // The copy it registered again: readers of the old store may hold leases on it.
    REQUIRE(s.unpublish("a", "m", 2).is_ok());
    CHECK(s.drained("a", "m", 2).value() == false);
    s.expire(t0 + Millis(900));
    CHECK(s.drained("a", "m", 2).value() == false);
    s.expire(t0 + Millis(1000));
    CHECK(s.drained("a", "m", 2).value() == true);
    // A first registration (not again) drains at once when it has no leases.
    REQUIRE(s.register_holder(holder("b", m2), t0 + Millis(1000)).is_ok());
    REQUIRE(s.unpublish("b", "m", 2).is_ok());
    CHECK(s.drained("b", "m", 2).value() == true);
  }

  TEST_CASE("an unpublished copy gets no new leases and drains when its leases end") {
    WeightStore s;
    auto m = manifest(1);
    REQUIRE(s.put_manifest(m).is_ok());
    REQUIRE(s.register_holder(holder("a", m), t0).is_ok());
    REQUIRE(s.register_holder(holder("b", m), t0).is_ok());
    auto p = s.plan("m", 1, {}, t0);
    REQUIRE(p.is_ok());
    REQUIRE(s.unpublish("a", "m", 1).is_ok());
    CHECK(s.drained("a", "m", 1).value() == false);  // under lease: not to be freed
    auto q = s.plan("m", 1, {}, t0);
    REQUIRE(q.is_ok());
    for (const auto& h : q->holders)
      CHECK(h.holder_id != "a");
    REQUIRE(s.release(p->lease_id).is_ok());
    CHECK(s.drained("a", "m", 1).value() == true);
    CHECK(s.release(p->lease_id).code() == Code::kNotFound);
  }

  TEST_CASE("expired leases are reclaimed, renewed ones are not") {
    StoreConfig cfg;
    cfg.lease_ttl = Millis(100);
    cfg.holder_ttl = Millis(100000);
    WeightStore s(cfg);
    auto m = manifest(1);
    REQUIRE(s.put_manifest(m).is_ok());
    REQUIRE(s.register_holder(holder("a", m), t0).is_ok());
    auto p1 = s.plan("m", 1, {}, t0).value();
    auto p2 = s.plan("m", 1, {}, t0).value();
    REQUIRE(s.unpublish("a", "m", 1).is_ok());
    REQUIRE(s.renew(p2.lease_id, t0 + Millis(80)).is_ok());
    s.expire(t0 + Millis(150));  // p1 expired, p2 renewed until 180
    CHECK(s.drained("a", "m", 1).value() == false);
    CHECK(s.renew(p1.lease_id, t0 + Millis(150)).code() == Code::kNotFound);
    s.expire(t0 + Millis(200));
    CHECK(s.drained("a", "m", 1).value() == true);
  }

  TEST_CASE("retention keeps the newest K committed versions and pinned ones") {
    StoreConfig cfg;
    cfg.keep_versions = 2;
    WeightStore s(cfg);
    for (std::uint64_t v = 1; v <= 5; ++v) {
      auto m = manifest(v);
      REQUIRE(s.put_manifest(m).is_ok());
      if (v <= 4) REQUIRE(s.register_holder(holder("h" + std::to_string(v), m), t0).is_ok());
    }
    CHECK(s.retained("m") == std::set<std::uint64_t>{3, 4, 5});  // 5 is still being published
    REQUIRE(s.pin("m", 1, "rollout-7").is_ok());
    CHECK(s.retained("m") == std::set<std::uint64_t>{1, 3, 4, 5});
    s.unpin("m", 1, "rollout-7");
    CHECK(s.retained("m") == std::set<std::uint64_t>{3, 4, 5});
    StoreConfig one;
    one.keep_versions = 1;  // raised to the minimum of 2
    WeightStore t(one);
    for (std::uint64_t v = 1; v <= 3; ++v) {
      auto m = manifest(v);
      REQUIRE(t.put_manifest(m).is_ok());
      REQUIRE(t.register_holder(holder("h", m), t0).is_ok());
    }
    CHECK(t.retained("m") == std::set<std::uint64_t>{2, 3});
  }

  TEST_CASE("holders without heartbeats expire, and a plan then says no holder is live") {
    StoreConfig cfg;
    cfg.holder_ttl = Millis(100);
    WeightStore s(cfg);
    auto m = manifest(1);
    REQUIRE(s.put_manifest(m).is_ok());
    REQUIRE(s.register_holder(holder("a", m), t0).is_ok());
    REQUIRE(s.register_holder(holder("b", m), t0).is_ok());
    REQUIRE(s.heartbeat("b", t0 + Millis(90)).is_ok());
    CHECK(s.expire(t0 + Millis(150)) == std::vector<std::string>{"a"});
    auto p = s.plan("m", 1, {}, t0 + Millis(150));
    REQUIRE(p.is_ok());
    CHECK(p->holders.size() == 1);
    CHECK(s.expire(t0 + Millis(300)) == std::vector<std::string>{"b"});
    CHECK(s.plan("m", 1, {}, t0 + Millis(300)).status().code() == Code::kUnavailable);
    CHECK(s.latest("m").value() == 1);  // committed stays committed
    CHECK(s.heartbeat("a", t0).code() == Code::kNotFound);
  }

  TEST_CASE("a restarted store rebuilds versions, holders and latest from re-registrations") {
    auto m3 = manifest(3), m4 = manifest(4);
    WeightStore fresh;
    CHECK(fresh.latest("m").status().code() == Code::kNotFound);
    REQUIRE(fresh.register_holder(holder("relay-1", m3), t0).is_ok());
    REQUIRE(
        fresh.register_holder(holder("relay-2", m4, {}, {true, true, false, false}), t0).is_ok());
    CHECK(fresh.latest("m").value() == 3);
    REQUIRE(fresh.register_holder(holder("relay-1", m4), t0).is_ok());
    CHECK(fresh.latest("m").value() == 4);
    auto p = fresh.plan("m", 0, {}, t0);
    REQUIRE(p.is_ok());
    CHECK(p->manifest.version == 4);
    // A holder that brings a different manifest for a known version is refused.
    CHECK(fresh.register_holder(holder("liar", manifest(4, 2048)), t0).code() ==
          Code::kInvalidArgument);
  }
}

TEST_SUITE("weightstore.store.bounds") {
  TEST_CASE("a new version is 1 to 2^53-1 and at most max_version_ahead past the newest") {
    StoreConfig cfg;
    cfg.max_version_ahead = 10;
    WeightStore s(cfg);
    for (std::uint64_t v : {std::uint64_t(0), UINT64_MAX, kMaxVersion + 1}) {
      CAPTURE(v);
      CHECK(s.put_manifest(manifest(v)).code() == Code::kInvalidArgument);
      CHECK(s.register_holder(holder("relay-0", manifest(v)), t0).code() == Code::kInvalidArgument);
    }
    CHECK(s.models().empty());  // nothing was kept of any of them
    // Nothing known: a holder may bring any version below the bound (a restarted store).
    REQUIRE(s.register_holder(holder("relay-0", manifest(kMaxVersion - 20)), t0).is_ok());
    CHECK(s.latest("m").value() == kMaxVersion - 20);
    CHECK(s.put_manifest(manifest(kMaxVersion - 9)).code() == Code::kInvalidArgument);
    CHECK(s.register_holder(holder("relay-1", manifest(kMaxVersion - 9)), t0).code() ==
          Code::kInvalidArgument);
    REQUIRE(s.put_manifest(manifest(kMaxVersion - 10)).is_ok());
    // kMaxVersion itself is a version; nothing above it ever is.
    REQUIRE(s.register_holder(holder("relay-1", manifest(kMaxVersion)), t0).is_ok());
    CHECK(s.latest("m").value() == kMaxVersion);
  }

  TEST_CASE("a lease is renewed and released only by the identity that took it") {
    WeightStore s;
    auto m = manifest(1);
    REQUIRE(s.put_manifest(m).is_ok());
    REQUIRE(s.register_holder(holder("a", m), t0).is_ok());
    auto p = s.plan("m", 1, {}, t0, "rollout-0").value();
    const std::string before = s.state_digest();
    CHECK(s.renew(p.lease_id, t0 + Millis(5), "rollout-1").code() == Code::kPermissionDenied);
    CHECK(s.release(p.lease_id, "rollout-1").code() == Code::kPermissionDenied);
    CHECK(s.state_digest() == before);
    CHECK(s.renew(p.lease_id, t0 + Millis(5), "rollout-0").is_ok());
    CHECK(s.state_digest() != before);  // the expiry moved: the digest sees it
    CHECK(s.release(p.lease_id, "rollout-0").is_ok());
    CHECK(s.active_leases("a") == 0);
    // Plain mode names nobody: a lease taken without an identity is anyone's.
    auto q = s.plan("m", 1, {}, t0).value();
    CHECK(s.release(q.lease_id).is_ok());
  }

  TEST_CASE("a relay's holder id is bound to the identity that joined with it") {
    WeightStore s;
    REQUIRE(s.join_relay("relay-0", {}, t0, "relay-0").is_ok());
    const std::string before = s.state_digest();
    CHECK(s.join_relay("relay-0", {"elsewhere", "", ""}, t0 + Millis(1), "relay-1").code() ==
          Code::kPermissionDenied);
    CHECK(s.register_holder(holder("relay-0", manifest(1)), t0, "rollout-0").code() ==
          Code::kPermissionDenied);
    CHECK(s.state_digest() == before);
    CHECK(s.join_relay("relay-0", {}, t0 + Millis(1), "relay-0").is_ok());
  }
}

TEST_SUITE("weightstore.broadcast") {
  TEST_CASE("relays pull from their chain predecessor, their tree parent, or the publisher") {
    auto m = manifest(1);
    auto source_of = [&](const std::string& broadcast, const std::string& relay,
                         std::set<std::string> exclude = {}) {
      StoreConfig cfg;
      cfg.broadcast = broadcast;
      cfg.fanout = 2;
      WeightStore s(cfg);
      REQUIRE(s.put_manifest(m).is_ok());
      REQUIRE(s.register_holder(holder("actor", m), t0).is_ok());
      for (const char* r : {"r1", "r2", "r3", "r4", "r5"}) {
        REQUIRE(s.join_relay(r, {}, t0).is_ok());
        // every relay already holds the first chunk: partial holders serve what they have
        REQUIRE(s.register_holder(holder(r, m, {}, {true, false, false, false}), t0).is_ok());
      }
      auto src = s.chain_source("m", 1, relay, exclude);
      REQUIRE_MESSAGE(src.is_ok(), src.status().to_string());
      return src->holder_id;
    };
    CHECK(source_of("chain", "r1") == "actor");
    CHECK(source_of("chain", "r4") == "r3");
    CHECK(source_of("chain", "r4", {"r3"}) == "r2");  // a failed predecessor is skipped
    CHECK(source_of("tree", "r1") == "actor");
    CHECK(source_of("tree", "r2") == "actor");
    CHECK(source_of("tree", "r3") == "r1");
    CHECK(source_of("tree", "r5") == "r2");
    CHECK(source_of("tree", "r5", {"r2"}) == "actor");
    CHECK(source_of("direct", "r5") == "actor");
  }

  TEST_CASE("a relay waits for a live predecessor that has nothing yet, not the publisher") {
    auto m = manifest(1);
    WeightStore s;  // chain
    REQUIRE(s.put_manifest(m).is_ok());
    REQUIRE(s.register_holder(holder("actor", m), t0).is_ok());
    for (const char* r : {"r1", "r2", "r3"})
      REQUIRE(s.join_relay(r, {}, t0).is_ok());
    // r1 and r2 have started on the version (registered, no chunk verified); r3 asks.
    REQUIRE(s.register_holder(holder("r1", m, {}, {true, false, false, false}), t0).is_ok());
    REQUIRE(s.register_holder(holder("r2", m, {}, {false, false, false, false}), t0).is_ok());
    auto src = s.chain_source("m", 1, "r3", {});
    REQUIRE(src.is_ok());
    CHECK(src->holder_id == "r2");  // named with no chunks: r3 reads nothing and asks again
    CHECK(std::none_of(src->chunks.begin(), src->chunks.end(), [](bool b) { return b; }));
    // Once r2 has failed for it, r3 goes on to r1, which has a chunk.
    CHECK(s.chain_source("m", 1, "r3", {"r2"}).value().holder_id == "r1");
    // A relay whose predecessor has not started on the version yet still reads from further up.
    REQUIRE(s.join_relay("r4", {}, t0).is_ok());
    REQUIRE(s.join_relay("r5", {}, t0).is_ok());
    CHECK(s.chain_source("m", 1, "r5", {}).value().holder_id == "r2");
  }
}

TEST_SUITE("weightstore.share") {
  // A version of one [64, 16] F32 tensor in 1 KiB chunks, with a rows layout of tp 2 declared:
  // each rank's share is 2 KiB, 2 chunks.
  core::Manifest shared_manifest(std::uint64_t version) {
    std::vector<std::uint8_t> bytes(4096);
    std::iota(bytes.begin(), bytes.end(), static_cast<std::uint8_t>(version));
    core::TensorSpec t{"w", "F32", {64, 16}, 0, 4096};
    auto m = core::make_manifest("m", version, {t}, bytes.data(), bytes.size(), 1024).value();
    core::ShardLayout l;
    l.tp_size = 2;
    l.splits = {{"w", core::Split::kRows}};
    REQUIRE(core::add_shard_checksums(m, l, bytes.data()).is_ok());
    return m;
  }

  TEST_CASE("relays of one share form a chain of their own, headed by the whole version") {
    const auto m = shared_manifest(1);
    const std::string s0 = core::share_model("m", 2, 0, "r"),
                      s1 = core::share_model("m", 2, 1, "r");
    const auto share0 = core::share_manifest(m, s0).value();
    WeightStore s;
    REQUIRE(s.put_manifest(m).is_ok());
    REQUIRE(s.register_holder(holder("actor", m), t0).is_ok());
    REQUIRE(s.join_relay("whole", {}, t0).is_ok());
    REQUIRE(s.join_relay("a0", {}, t0, {}, "tp2.0").is_ok());
    REQUIRE(s.join_relay("b1", {}, t0, {}, "tp2.1").is_ok());
    REQUIRE(s.join_relay("c0", {}, t0, {}, "tp2.0").is_ok());
    // The first relay of a share reads its pieces from the publisher's whole version.
    auto head = s.chain_source(s0, 1, "a0", {});
    REQUIRE_MESSAGE(head.is_ok(), head.status().to_string());
    CHECK(head->holder_id == "actor");
    CHECK(head->model == "m");
    // Once it has started, the next relay of its share follows it, not the publisher; a relay
    // of the other share is not in that chain.
    REQUIRE(s.register_holder(holder("a0", share0, {}, {true, false}), t0).is_ok());
    auto next = s.chain_source(s0, 1, "c0", {});
    REQUIRE(next.is_ok());
    CHECK(next->holder_id == "a0");
    CHECK(next->model.empty());
    CHECK(s.chain_source(s1, 1, "b1", {}).value().holder_id == "actor");
    // A whole-version relay's chain has no share relay in it.
    CHECK(s.chain_source("m", 1, "whole", {}).value().holder_id == "actor");
    // A share copy never commits the version, and the share commits once a copy is whole.
    CHECK_FALSE(s.committed(s0, 1));
    REQUIRE(s.add_chunks("a0", s0, 1, {1}, t0).is_ok());
    CHECK(s.committed(s0, 1));
    CHECK(s.latest(s0).value() == 1);
  }

  TEST_CASE("a publisher's copy stays undrained while a share relay reads pieces of it") {
    const auto m = shared_manifest(1);
    const std::string s0 = core::share_model("m", 2, 0, "r");
    WeightStore s;
    REQUIRE(s.put_manifest(m).is_ok());
    REQUIRE(s.register_holder(holder("actor", m), t0).is_ok());
    REQUIRE(s.join_relay("a0", {}, t0, {}, "tp2.0").is_ok());
    REQUIRE(
        s.register_holder(holder("a0", core::share_manifest(m, s0).value(), {}, {false, false}), t0)
            .is_ok());
    REQUIRE(s.chain_source(s0, 1, "a0", {}).value().holder_id == "actor");
    REQUIRE(s.unpublish("actor", "m", 1).is_ok());
    CHECK_FALSE(s.drained("actor", "m", 1).value());
    REQUIRE(s.add_chunks("a0", s0, 1, {0, 1}, t0).is_ok());
    CHECK(s.drained("actor", "m", 1).value());
  }
}

TEST_SUITE("weightstore.handoff") {
  TEST_CASE("holders() reports each copy as complete or partial, relay or not, and unpublished") {
    WeightStore s;
    auto m = manifest(1);  // 4 chunks
    REQUIRE(s.put_manifest(m).is_ok());
    CHECK(s.holders("m", 1).empty());
    REQUIRE(s.register_holder(holder("actor", m), t0).is_ok());
    REQUIRE(s.join_relay("r1", {}, t0).is_ok());
    REQUIRE(s.register_holder(holder("r1", m, {}, {true, false, true, false}), t0).is_ok());
    auto find = [&](const std::string& id) {
      for (const auto& h : s.holders("m", 1))
        if (h.holder_id == id) return h;
      FAIL("no holder " << id);
      return HolderState{};
    };
    REQUIRE(s.holders("m", 1).size() == 2);
    auto actor = find("actor"), r1 = find("r1");
    CHECK(actor.complete);
    CHECK(actor.chunks == 4);
    CHECK_FALSE(actor.relay);
    CHECK_FALSE(actor.unpublished);
    CHECK_FALSE(r1.complete);
    CHECK(r1.chunks == 2);
    CHECK(r1.relay);
    REQUIRE(s.add_chunks("r1", "m", 1, {1, 3}, t0).is_ok());
    CHECK(find("r1").complete);
    CHECK(find("r1").chunks == 4);
    REQUIRE(s.unpublish("actor", "m", 1).is_ok());
    CHECK(find("actor").unpublished);
    CHECK(s.holders("m", 2).empty());  // a version nobody holds
  }

  TEST_CASE("a copy a relay was sent to read from drains only once the relay moves on") {
    StoreConfig cfg;
    cfg.broadcast = "tree";
    cfg.fanout = 2;
    WeightStore s(cfg);
    auto m = manifest(1);
    REQUIRE(s.put_manifest(m).is_ok());
    REQUIRE(s.register_holder(holder("actor", m), t0).is_ok());
    REQUIRE(s.join_relay("r1", {}, t0).is_ok());
    REQUIRE(s.join_relay("r2", {}, t0).is_ok());
    REQUIRE(s.register_holder(holder("r1", m, {}, {true, false, false, false}), t0).is_ok());
    REQUIRE(s.register_holder(holder("r2", m, {}, {false, false, false, false}), t0).is_ok());
    // Both children of the root read from the publisher.
    CHECK(s.chain_source("m", 1, "r1", {}).value().holder_id == "actor");
    CHECK(s.chain_source("m", 1, "r2", {}).value().holder_id == "actor");
    // r2 finishes first; the publisher hands off and unpublishes. r1 is still mid-read from it
    // (relays take no lease), so its copy has not drained.
    REQUIRE(s.add_chunks("r2", "m", 1, {0, 1, 2, 3}, t0).is_ok());
    REQUIRE(s.unpublish("actor", "m", 1).is_ok());
    CHECK(s.drained("actor", "m", 1).value() == false);
    // r1 asks again: the publisher is withdrawn and r1 has no ancestor, so it is sent to the
    // complete relay behind it rather than left without a source; the publisher has drained.
    auto next = s.chain_source("m", 1, "r1", {});
    REQUIRE_MESSAGE(next.is_ok(), next.status().to_string());
    CHECK(next->holder_id == "r2");
    CHECK(s.drained("actor", "m", 1).value() == true);

    // The same when the relay completes instead of asking again.
    WeightStore t;
    REQUIRE(t.put_manifest(m).is_ok());
    REQUIRE(t.register_holder(holder("actor", m), t0).is_ok());
    REQUIRE(t.join_relay("r1", {}, t0).is_ok());
    REQUIRE(t.register_holder(holder("r1", m, {}, {false, false, false, false}), t0).is_ok());
    CHECK(t.chain_source("m", 1, "r1", {}).value().holder_id == "actor");
    REQUIRE(t.unpublish("actor", "m", 1).is_ok());
    CHECK(t.drained("actor", "m", 1).value() == false);
    REQUIRE(t.add_chunks("r1", "m", 1, {0, 1, 2}, t0).is_ok());
    CHECK(t.drained("actor", "m", 1).value() == false);
    REQUIRE(t.add_chunks("r1", "m", 1, {3}, t0).is_ok());
    CHECK(t.drained("actor", "m", 1).value() == true);

    // And when the relay dies: its expiry ends what it held up.
    StoreConfig short_ttl;
    short_ttl.holder_ttl = Millis(100);
    WeightStore u(short_ttl);
    REQUIRE(u.put_manifest(m).is_ok());
    REQUIRE(u.register_holder(holder("actor", m), t0).is_ok());
    REQUIRE(u.join_relay("r1", {}, t0).is_ok());
    REQUIRE(u.register_holder(holder("r1", m, {}, {false, false, false, false}), t0).is_ok());
    CHECK(u.chain_source("m", 1, "r1", {}).value().holder_id == "actor");
    REQUIRE(u.unpublish("actor", "m", 1).is_ok());
    CHECK(u.drained("actor", "m", 1).value() == false);
    REQUIRE(u.heartbeat("actor", t0 + Millis(90)).is_ok());
    CHECK(u.expire(t0 + Millis(150)) == std::vector<std::string>{"r1"});
    CHECK(u.drained("actor", "m", 1).value() == true);
  }
}

TEST_SUITE("weightstore.owners") {
  TEST_CASE("a holder id belongs to the identity that registered it, while it lives") {
    WeightStore s(StoreConfig{2, Millis(100)});
    auto m = manifest(1);
    REQUIRE(s.put_manifest(m).is_ok());
    CHECK(s.knows("m", 1));
    CHECK_FALSE(s.knows("m", 2));
    REQUIRE(s.register_holder(holder("actor-0", m), t0, "actor").is_ok());
    CHECK(s.check_owner("actor-0", "actor").is_ok());
    CHECK(s.check_owner("actor-0", "").is_ok());          // plain mode: nobody is known
    CHECK(s.check_owner("nobody", "rollout-0").is_ok());  // unknown: the request says not_found
    CHECK(s.check_owner("actor-0", "rollout-0").code() == Code::kPermissionDenied);
    const std::string before = s.state_digest();
    auto again = s.register_holder(holder("actor-0", m), t0, "rollout-0");
    CHECK(again.code() == Code::kPermissionDenied);
    CHECK(again.message().find("registered by actor") != std::string::npos);
    CHECK(s.state_digest() == before);
    // The owner registers again (after a store restart, or another version): still its own.
    CHECK(s.register_holder(holder("actor-0", m), t0 + Millis(10), "actor").is_ok());
    // Once the holder expired, the id is free.
    CHECK(s.expire(t0 + Millis(500)) == std::vector<std::string>{"actor-0"});
    CHECK(s.register_holder(holder("actor-0", m), t0 + Millis(510), "relay-0").is_ok());
    CHECK(s.check_owner("actor-0", "relay-0").is_ok());
  }
}

TEST_SUITE("weightstore.datacenters") {
  // Relays with datacenter labels, joined interleaved across datacenters; each holds the first
  // chunk (partial holders serve what they have). The publisher "actor" is in `publisher_dc`.
  struct DcFixture {
    core::Manifest m = manifest(1);
    WeightStore s;
    std::map<std::string, std::string> dc_of;
    explicit DcFixture(const std::vector<std::pair<std::string, std::string>>& relays,
                       const std::string& publisher_dc = "dc0") {
      REQUIRE(s.put_manifest(m).is_ok());
      REQUIRE(s.register_holder(holder("actor", m, {"h-actor", "", publisher_dc}), t0).is_ok());
      dc_of["actor"] = publisher_dc;
      for (const auto& [id, dc] : relays) {
        Topology t{"h-" + id, "", dc};
        REQUIRE(s.join_relay(id, t, t0).is_ok());
        REQUIRE(s.register_holder(holder(id, m, t, {true, false, false, false}), t0).is_ok());
        dc_of[id] = dc;
      }
    }
    std::string source(const std::string& relay, std::set<std::string> exclude = {}) {
      auto src = s.chain_source("m", 1, relay, exclude);
      REQUIRE_MESSAGE(src.is_ok(), src.status().to_string());
      return src->holder_id;
    }
  };

  TEST_CASE(
      "with datacenter labels, one seed per datacenter pulls across the WAN, the rest inside") {
    // Join order interleaves datacenters, and dc1's first relay joins before dc0's.
    DcFixture f({{"a1", "dc1"},
                 {"b0", "dc0"},
                 {"c2", "dc2"},
                 {"d0", "dc0"},
                 {"e1", "dc1"},
                 {"f2", "dc2"},
                 {"g1", "dc1"},
                 {"h0", "dc0"},
                 {"i2", "dc2"}});
    // Seeds: the publisher's datacenter first, then the others in the order their seeds joined.
    CHECK(f.source("b0") == "actor");
    CHECK(f.source("a1") == "b0");
    CHECK(f.source("c2") == "a1");
    // Everybody else chains inside its own datacenter, in join order.
    CHECK(f.source("d0") == "b0");
    CHECK(f.source("h0") == "d0");
    CHECK(f.source("e1") == "a1");
    CHECK(f.source("g1") == "e1");
    CHECK(f.source("f2") == "c2");
    CHECK(f.source("i2") == "f2");
    // A failed seed is skipped for the seed before it; a failed neighbour for the one before.
    CHECK(f.source("c2", {"a1"}) == "b0");
    CHECK(f.source("i2", {"f2"}) == "c2");

    // What the WAN links carry: one copy into each datacenter but the publisher's, and at most
    // one out of each.
    std::map<std::string, int> in, out;
    for (const char* r : {"a1", "b0", "c2", "d0", "e1", "f2", "g1", "h0", "i2"}) {
      std::string from = f.source(r);
      if (f.dc_of[from] != f.dc_of[r]) ++out[f.dc_of[from]], ++in[f.dc_of[r]];
    }
    CHECK(in["dc0"] == 0);
    CHECK(in["dc1"] == 1);
    CHECK(in["dc2"] == 1);
    for (const auto& [dc, n] : out)
      CHECK_MESSAGE(n <= 1, dc);
    // The relays another datacenter reads from are told so (they make deltas for that link):
    // dc0's seed and dc1's, not the last datacenter's seed and nobody inside a datacenter.
    for (const char* r : {"a1", "b0", "c2", "d0", "e1", "f2", "g1", "h0", "i2"}) {
      CAPTURE(r);
      const bool feeds = std::string(r) == "b0" || std::string(r) == "a1";
      CHECK(f.s.feeds_other_datacenter("m", 1, r) == feeds);
    }
  }

  TEST_CASE("across datacenters a relay waits for a live ancestor rather than read over the WAN") {
    auto m = manifest(1);
    WeightStore s;
    REQUIRE(s.put_manifest(m).is_ok());
    REQUIRE(s.register_holder(holder("actor", m, {"h0", "", "dc0"}), t0).is_ok());
    for (auto [id, dc] : std::vector<std::pair<std::string, std::string>>{
             {"s0", "dc0"}, {"s1", "dc1"}, {"r1", "dc1"}}) {
      REQUIRE(s.join_relay(id, {"h-" + id, "", dc}, t0).is_ok());
    }
    // Nobody has started on version 1: dc1's relays wait (s0, then s1, will see it within a
    // poll); only dc0's seed reads, from the publisher.
    CHECK(s.chain_source("m", 1, "s0", {}).value().holder_id == "actor");
    CHECK(s.chain_source("m", 1, "s1", {}).status().code() == Code::kUnavailable);
    CHECK(s.chain_source("m", 1, "r1", {}).status().code() == Code::kUnavailable);
    // s1 has started (nothing verified): r1 waits on it, by name.
    REQUIRE(
        s.register_holder(holder("s1", m, {"h-s1", "", "dc1"}, {false, false, false, false}), t0)
            .is_ok());
    CHECK(s.chain_source("m", 1, "r1", {}).value().holder_id == "s1");
    // With its ancestor failed, r1 takes the nearest complete copy: one in its own datacenter
    // (a rollout's, here) before the publisher's across the WAN.
    REQUIRE(s.register_holder(holder("rollout-9", m, {"h-r1", "", "dc1"}), t0).is_ok());
    CHECK(s.chain_source("m", 1, "r1", {"s1"}).value().holder_id == "rollout-9");
    CHECK(s.chain_source("m", 1, "r1", {"s1", "rollout-9"}).value().holder_id == "actor");
    // s0 stops heartbeating and expires: s1 no longer waits for it and reads from the nearest
    // complete copy, the one in its own datacenter, else the publisher's.
    REQUIRE(s.heartbeat("s1", t0 + Millis(2500)).is_ok());
    REQUIRE(s.heartbeat("actor", t0 + Millis(2500)).is_ok());
    REQUIRE(s.heartbeat("rollout-9", t0 + Millis(2500)).is_ok());
    REQUIRE(s.heartbeat("r1", t0 + Millis(2500)).is_ok());
    auto gone = s.expire(t0 + Millis(4000));
    CHECK(gone == std::vector<std::string>{"s0"});
    CHECK(s.chain_source("m", 1, "s1", {}).value().holder_id == "rollout-9");
    CHECK(s.chain_source("m", 1, "s1", {"rollout-9"}).value().holder_id == "actor");
  }

  TEST_CASE("a seed never reads past the seed before it while that one lives") {
    auto m = manifest(1);
    WeightStore s;
    REQUIRE(s.put_manifest(m).is_ok());
    REQUIRE(s.register_holder(holder("actor", m, {"h0", "", "dc0"}), t0).is_ok());
    for (auto [id, dc] : std::vector<std::pair<std::string, std::string>>{
             {"s0", "dc0"}, {"s1", "dc1"}, {"s2", "dc2"}}) {
      REQUIRE(s.join_relay(id, {"h-" + id, "", dc}, t0).is_ok());
    }
    // dc0's seed has chunks, dc1's has not started: dc2's seed waits for dc1's rather than take
    // the version over dc0's and dc2's WAN links a second time.
    REQUIRE(s.register_holder(holder("s0", m, {"h-s0", "", "dc0"}, {true, true, false, false}), t0)
                .is_ok());
    CHECK(s.chain_source("m", 1, "s2", {}).status().code() == Code::kUnavailable);
    REQUIRE(
        s.register_holder(holder("s1", m, {"h-s1", "", "dc1"}, {false, false, false, false}), t0)
            .is_ok());
    CHECK(s.chain_source("m", 1, "s2", {}).value().holder_id == "s1");
    // Once dc1's seed has failed it, dc2's seed goes to dc0's.
    CHECK(s.chain_source("m", 1, "s2", {"s1"}).value().holder_id == "s0");
  }

  TEST_CASE("an ancestor that moved on to a newer version is not waited for") {
    auto m1 = manifest(1), m2 = manifest(2);
    WeightStore s;
    REQUIRE(s.put_manifest(m1).is_ok());
    REQUIRE(s.put_manifest(m2).is_ok());
    REQUIRE(s.register_holder(holder("actor", m1, {"h0", "", "dc0"}), t0).is_ok());
    REQUIRE(s.join_relay("s1", {"h1", "", "dc1"}, t0).is_ok());
    REQUIRE(s.join_relay("r1", {"h2", "", "dc1"}, t0).is_ok());
    REQUIRE(s.register_holder(holder("s1", m2, {"h1", "", "dc1"}, {true, false, false, false}), t0)
                .is_ok());
    // s1 holds 2 (part of it) and never started on 1: r1 reads 1 from the publisher.
    CHECK(s.chain_source("m", 1, "r1", {}).value().holder_id == "actor");
  }

  TEST_CASE("without datacenter labels the chain is the join order, host labels or not") {
    {
      // And no relay feeds another datacenter: nobody makes deltas unasked.
      auto m = manifest(1);
      WeightStore s;
      REQUIRE(s.put_manifest(m).is_ok());
      REQUIRE(s.register_holder(holder("actor", m, {"h0", "", ""}), t0).is_ok());
      REQUIRE(s.join_relay("r0", {"h1", "", ""}, t0).is_ok());
      REQUIRE(s.join_relay("r1", {"h2", "", ""}, t0).is_ok());
      CHECK_FALSE(s.feeds_other_datacenter("m", 1, "r0"));
      CHECK_FALSE(s.feeds_other_datacenter("m", 1, "r1"));
    }
    for (bool hosts : {false, true}) {
      auto m = manifest(1);
      WeightStore s;
      REQUIRE(s.put_manifest(m).is_ok());
      REQUIRE(s.register_holder(holder("actor", m), t0).is_ok());
      std::vector<std::string> ids = {"r3", "r1", "r5", "r2", "r4"};  // join order
      for (const auto& id : ids) {
        Topology t{hosts ? "h-" + id : "", hosts ? "rack-a" : "", ""};
        REQUIRE(s.join_relay(id, t, t0).is_ok());
        REQUIRE(s.register_holder(holder(id, m, t, {true, false, false, false}), t0).is_ok());
      }
      CHECK(s.chain_source("m", 1, ids[0], {}).value().holder_id == "actor");
      for (std::size_t i = 1; i < ids.size(); ++i)
        CHECK(s.chain_source("m", 1, ids[i], {}).value().holder_id == ids[i - 1]);
      // A predecessor that has not started yet: the relay reads from further up, as before.
      REQUIRE(s.join_relay("r6", {}, t0).is_ok());
      REQUIRE(s.join_relay("r7", {}, t0).is_ok());
      CHECK(s.chain_source("m", 1, "r7", {}).value().holder_id == "r4");
    }
  }
}
