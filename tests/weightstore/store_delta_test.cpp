// The store's deltas: offered like versions, ranked for a reader, kept while leased, dropped
// with retention; and their messages round-trip and refuse what is malformed.
#include <doctest/doctest.h>

#include <numeric>

#include "weightstore/protocol.hpp"
#include "weightstore/store.hpp"

using namespace sluice;
using namespace sluice::weightstore;
using core::Code;

namespace {

core::Manifest manifest(std::uint64_t version, std::uint64_t floats = 1024) {
  std::vector<std::uint8_t> bytes(floats * 4);
  std::iota(bytes.begin(), bytes.end(), static_cast<std::uint8_t>(version));
  core::TensorSpec t{"w", "F32", {floats}, 0, floats * 4};
  return core::make_manifest("m", version, {t}, bytes.data(), bytes.size(), 1024).value();
}

HolderRegistration holder(const std::string& id, const core::Manifest& m, Topology topo = {}) {
  HolderRegistration r;
  r.holder_id = id;
  r.endpoint = "ep-" + id;
  r.descriptor = "desc-" + id;
  r.topology = std::move(topo);
  r.manifest = m;
  return r;
}

DeltaRegistration delta(const std::string& id, std::uint64_t base, std::uint64_t target,
                        Topology topo = {}, std::uint64_t bytes = 300) {
  DeltaRegistration r;
  r.holder_id = id;
  r.endpoint = "ep-" + id;
  r.descriptor = "ddesc-" + id;
  r.topology = std::move(topo);
  r.delta = {"m", base, target, bytes, 256, std::vector<std::uint64_t>((bytes + 255) / 256, 7)};
  return r;
}

const Clock::time_point t0{};

// A store with versions 1..n committed by holder "actor" in datacenter a.
WeightStore with_versions(std::uint64_t n, StoreConfig c = {}) {
  WeightStore s(c);
  for (std::uint64_t v = 1; v <= n; ++v) {
    auto m = manifest(v);
    REQUIRE(s.put_manifest(m).is_ok());
    REQUIRE(s.register_holder(holder("actor", m, {"h0", "", "a"}), t0).is_ok());
  }
  return s;
}

}  // namespace

TEST_SUITE("weightstore.delta") {
  TEST_CASE("a reader that holds N is told where the delta N->N+1 is, nearest first") {
    WeightStore s = with_versions(2);
    const Topology reader{"h9", "", "b"};
    // Nothing offered and no maker: not available, not expected.
    auto none = s.delta_plan("m", 1, 2, reader, t0).value();
    CHECK_FALSE(none.available);
    CHECK_FALSE(none.expected);
    CHECK(none.target_bytes == 4096);
    REQUIRE(s.register_delta(delta("far", 1, 2, {"h1", "", "a"}), t0).is_ok());
    REQUIRE(s.register_delta(delta("near", 1, 2, {"h2", "", "b"}), t0).is_ok());
    auto p = s.delta_plan("m", 1, 2, reader, t0).value();
    REQUIRE(p.available);
    CHECK(p.delta.bytes == 300);
    CHECK(p.delta.bytes < p.target_bytes);
    REQUIRE(p.holders.size() == 2);
    CHECK(p.holders[0].holder_id == "near");
    CHECK(p.holders[0].distance == 2);
    CHECK(p.holders[0].descriptor == "ddesc-near");
    CHECK(p.holders[1].holder_id == "far");
    CHECK(p.holders[1].distance == 3);
    CHECK(p.lease_id > 0);
    // Another holder's other description of the pair is bound to that holder and blocks nobody:
    // the plan names the description most holders offer, and only its holders.
    REQUIRE(s.register_delta(delta("other", 1, 2, {"h9", "", "b"}, 500), t0).is_ok());
    auto q = s.delta_plan("m", 1, 2, reader, t0).value();
    CHECK(q.delta.bytes == 300);
    REQUIRE(q.holders.size() == 2);
    CHECK(q.holders[0].holder_id == "near");
    CHECK(s.deltas("m").size() == 3);
    // A holder that describes its own offer otherwise is refused, and nothing changes.
    auto before = s.state_digest();
    CHECK(s.register_delta(delta("near", 1, 2, {"h2", "", "b"}, 500), t0).code() ==
          Code::kAlreadyExists);
    CHECK(s.state_digest() == before);
  }

  TEST_CASE("an early bogus offer of a delta does not block a delta maker's") {
    WeightStore s = with_versions(2);
    REQUIRE(s.join_relay("relay-a", {"h1", "", "a"}, t0).is_ok());
    s.set_delta_maker("relay-a", true);
    // A rollout on the reader's own host offers a bogus description first.
    const Topology reader{"h9", "", "b"};
    REQUIRE(s.register_delta(delta("rollout-3", 1, 2, {"h9", "", "b"}, 500), t0).is_ok());
    REQUIRE(s.register_delta(delta("relay-a", 1, 2, {"h1", "", "a"}), t0).is_ok());
    auto p = s.delta_plan("m", 1, 2, reader, t0).value();
    REQUIRE(p.available);
    CHECK(p.delta.bytes == 300);
    REQUIRE(p.holders.size() == 1);
    CHECK(p.holders[0].holder_id == "relay-a");
    // Without the maker's offer, the only one there is is named (its rebuild is checked against
    // the target's signed digests by the reader).
    REQUIRE(s.unpublish_delta("relay-a", "m", 1, 2).is_ok());
    auto q = s.delta_plan("m", 1, 2, reader, t0).value();
    REQUIRE(q.holders.size() == 1);
    CHECK(q.holders[0].holder_id == "rollout-3");
  }

  TEST_CASE("deltas are refused for unknown versions, other layouts and bad descriptions") {
    WeightStore s = with_versions(2);
    CHECK(s.register_delta(delta("x", 2, 3), t0).code() == Code::kNotFound);
    CHECK(s.register_delta(delta("x", 2, 1), t0).code() == Code::kInvalidArgument);
    auto bad = delta("x", 1, 2);
    bad.delta.checksums.pop_back();
    CHECK(s.register_delta(bad, t0).code() == Code::kInvalidArgument);
    auto m3 = manifest(3, 2048);  // twice the size
    REQUIRE(s.put_manifest(m3).is_ok());
    REQUIRE(s.register_holder(holder("actor", m3), t0).is_ok());
    CHECK(s.register_delta(delta("x", 2, 3), t0).code() == Code::kInvalidArgument);
    CHECK(s.deltas("m").empty());
    // A plan for an uncommitted target says so.
    REQUIRE(s.put_manifest(manifest(4)).is_ok());
    CHECK(s.delta_plan("m", 3, 4, {}, t0).status().code() == Code::kFailedPrecondition);
  }

  TEST_CASE("a delta maker that holds a version makes a delta expected") {
    WeightStore s = with_versions(2);
    REQUIRE(s.join_relay("relay-a", {"h1", "", "a"}, t0).is_ok());
    s.set_delta_maker("relay-a", true);
    CHECK_FALSE(s.delta_plan("m", 1, 2, {}, t0).value().expected);  // it holds neither yet
    REQUIRE(s.register_holder(holder("relay-a", manifest(1), {"h1", "", "a"}), t0).is_ok());
    CHECK(s.delta_plan("m", 1, 2, {}, t0).value().expected);
    s.set_delta_maker("relay-a", false);
    CHECK_FALSE(s.delta_plan("m", 1, 2, {}, t0).value().expected);
  }

  TEST_CASE("a delta is kept while leased, and forgotten once unpublished and drained") {
    WeightStore s = with_versions(2);
    REQUIRE(s.register_delta(delta("r", 1, 2), t0).is_ok());
    auto p = s.delta_plan("m", 1, 2, {}, t0).value();
    REQUIRE(p.available);
    CHECK(s.unpublish_delta("r", "m", 1, 2).value() == false);  // leased
    // No new reader is sent to it.
    CHECK_FALSE(s.delta_plan("m", 1, 2, {}, t0).value().available);
    CHECK(s.delta_drained("r", "m", 1, 2).value() == false);
    REQUIRE(s.release(p.lease_id).is_ok());
    CHECK(s.delta_drained("r", "m", 1, 2).value() == true);
    CHECK(s.deltas("m").empty());
    // Asked again: the store no longer knows it (unknown, never "drained").
    CHECK(s.delta_drained("r", "m", 1, 2).status().code() == Code::kNotFound);
    CHECK(s.unpublish_delta("nobody", "m", 1, 2).status().code() == Code::kNotFound);
  }

  TEST_CASE("a delta lease expires and can be renewed like any lease") {
    StoreConfig c;
    c.lease_ttl = Millis(100);
    c.holder_ttl = Millis(100000);
    WeightStore s = with_versions(2, c);
    REQUIRE(s.register_delta(delta("r", 1, 2), t0).is_ok());
    auto p = s.delta_plan("m", 1, 2, {}, t0).value();
    CHECK(s.unpublish_delta("r", "m", 1, 2).value() == false);
    REQUIRE(s.renew(p.lease_id, t0 + Millis(80)).is_ok());
    s.expire(t0 + Millis(150));
    CHECK(s.delta_drained("r", "m", 1, 2).value() == false);  // renewed: still leased
    s.expire(t0 + Millis(200));
    CHECK(s.delta_drained("r", "m", 1, 2).value() == true);
  }

  TEST_CASE("a delta is dropped with retention, and with its holder") {
    WeightStore s = with_versions(2);  // keep_versions 2
    REQUIRE(s.register_delta(delta("r", 1, 2), t0).is_ok());
    REQUIRE(s.deltas("m").size() == 1);
    for (std::uint64_t v = 3; v <= 4; ++v) {
      auto m = manifest(v);
      REQUIRE(s.put_manifest(m).is_ok());
      REQUIRE(s.register_holder(holder("actor", m), t0).is_ok());
    }
    // Versions 1 and 2 left retention: the delta is no longer offered or listed.
    CHECK(s.deltas("m").empty());
    CHECK(s.delta_plan("m", 1, 2, {}, t0).status().code() == Code::kNotFound);
    CHECK(s.register_delta(delta("q", 1, 2), t0).code() == Code::kFailedPrecondition);
    REQUIRE(s.register_delta(delta("r", 3, 4), t0).is_ok());
    CHECK(s.deltas("m").size() == 1);
    // Its holder expires: the delta goes with it.
    s.expire(t0 + Millis(60000));
    CHECK(s.deltas("m").empty());
  }

  TEST_CASE("delta messages round-trip, and malformed ones are refused") {
    auto r = delta("relay-1", 4, 5, {"h", "r", "dc"});
    auto back = decode_delta_registration(encode(r)).value();
    CHECK(back.holder_id == r.holder_id);
    CHECK(back.descriptor == r.descriptor);
    CHECK(back.topology.datacenter == "dc");
    CHECK(back.delta == r.delta);
    auto m = encode(r);
    m.body["delta"]["checksums"] = nlohmann::json::array();
    CHECK(decode_delta_registration(m).status().code() == Code::kProtocol);
    m = encode(r);
    m.body["delta"]["base"] = "four";
    CHECK_FALSE(decode_delta_registration(m).is_ok());
    m = encode(r);
    m.blobs.clear();
    CHECK_FALSE(decode_delta_registration(m).is_ok());

    DeltaPlan p;
    p.available = true;
    p.delta = r.delta;
    p.target_bytes = 4096;
    p.lease_id = 9;
    p.holders.push_back({"relay-1", "ep", "desc", 3});
    auto pb = decode_delta_plan(encode(p)).value();
    CHECK(pb.available);
    CHECK(pb.delta == p.delta);
    CHECK(pb.holders.size() == 1);
    CHECK(pb.holders[0].descriptor == "desc");
    CHECK(pb.lease_id == 9);
    auto pm = encode(p);
    pm.blobs.clear();  // holders without descriptors
    CHECK(decode_delta_plan(pm).status().code() == Code::kProtocol);

    JoinRelay j{"relay-1", {}, true};
    CHECK(decode_join_relay(encode(j)).value().makes_deltas);
    CHECK_FALSE(
        decode_join_relay(encode(JoinRelay{"relay-2", {}, false, {}})).value().makes_deltas);
  }
}
