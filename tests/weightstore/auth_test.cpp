// The store's authorization: who may send what (docs/architecture.md, "Authorization"). Every
// refusal leaves the store's state digest as it was.
#include <doctest/doctest.h>

#include "../support/job_keys.hpp"
#include "core/event_loop.hpp"
#include "core/messaging.hpp"
#include "weightstore/protocol.hpp"
#include "weightstore/service.hpp"

using namespace sluice;
using namespace sluice::weightstore;
using core::Code;
using core::Message;
using core::Millis;
using testing::JobKeys;
using testing::never_answered;

namespace {

core::Manifest manifest(std::uint64_t version) {
  std::vector<std::uint8_t> bytes(4096, static_cast<std::uint8_t>(version));
  core::TensorSpec t{"w", "F32", {1024}, 0, 4096};
  return core::make_manifest("policy", version, {t}, bytes.data(), bytes.size(), 1024).value();
}

HolderRegistration reg(const std::string& id, std::uint64_t version) {
  HolderRegistration r;
  r.holder_id = id;
  r.endpoint = "tcp://127.0.0.1:9/" + id;
  r.descriptor = "descriptor of " + id;
  r.topology = {"host-" + id, "rack-1", "dc-1"};
  r.manifest = manifest(version);
  return r;
}

struct Store {
  JobKeys keys;
  JobKeys outsiders;
  std::unique_ptr<core::EventLoop> loop = core::EventLoop::create().value();
  std::unique_ptr<StoreService> svc;
  Store() {
    ServiceConfig cfg;
    cfg.listen = "tcp://127.0.0.1:*";
    cfg.security = keys.config("weightstore");
    svc = StoreService::create(*loop, cfg).value();
  }
  std::unique_ptr<core::Client> client(const std::string& identity) {
    return core::Client::create(*loop, svc->endpoint(),
                                keys.client_of(identity, core::kRoleWeightstore))
        .value();
  }
  core::Result<Message> call(core::Client& c, Message m, Millis t = Millis(5000)) {
    return c.call(std::move(m), t);
  }
};

}  // namespace

TEST_SUITE("weightstore.auth") {
  TEST_CASE(
      "only the actor puts manifests; a rollout cannot bring a version; refusals change nothing") {
    Store s;
    auto actor = s.client("actor");
    auto rollout = s.client("rollout-0");
    auto relay = s.client("relay-0");
    REQUIRE(s.call(*actor, encode(PutManifest{manifest(1)})).is_ok());
    REQUIRE(s.call(*actor, encode(reg("actor-0", 1))).is_ok());
    const std::string before = s.svc->store().state_digest();

    auto r1 = s.call(*rollout, encode(PutManifest{manifest(2)}));
    CHECK(r1.status().code() == Code::kPermissionDenied);
    auto r2 = s.call(*relay, encode(PutManifest{manifest(2)}));
    CHECK(r2.status().code() == Code::kPermissionDenied);
    // A registration of an unknown version would create it: not a rollout's to do.
    auto r3 = s.call(*rollout, encode(reg("rollout-0", 2)));
    CHECK(r3.status().code() == Code::kPermissionDenied);
    CHECK(r3.status().message().find("new version") != std::string::npos);
    // Relay-only requests.
    auto r4 = s.call(*rollout, encode(JoinRelay{"rollout-0", {}}));
    CHECK(r4.status().code() == Code::kPermissionDenied);
    CHECK(s.svc->store().state_digest() == before);
    CHECK_FALSE(s.svc->store().knows("policy", 2));
    // What a rollout may do: read the latest, register a copy of a known version.
    CHECK(s.call(*rollout, encode(LatestRequest{"policy"})).is_ok());
    CHECK(s.call(*rollout, encode(reg("rollout-0", 1))).is_ok());
  }

  TEST_CASE("only the identity that registered a copy unpublishes it or reports for it") {
    Store s;
    auto actor = s.client("actor");
    auto rollout = s.client("rollout-0");
    auto relay = s.client("relay-0");
    REQUIRE(s.call(*actor, encode(PutManifest{manifest(1)})).is_ok());
    HolderRegistration partial = reg("actor-0", 1);
    partial.chunks = {true, false, false, false};
    REQUIRE(s.call(*actor, encode(partial)).is_ok());
    const std::string before = s.svc->store().state_digest();

    Unpublish u;
    u.holder_id = "actor-0";
    u.model = "policy";
    u.version = 1;
    for (auto* c : {rollout.get(), relay.get()}) {
      auto r = s.call(*c, encode(u));
      CHECK(r.status().code() == Code::kPermissionDenied);
      CHECK(r.status().message().find("registered by actor") != std::string::npos);
      CHECK(s.call(*c, encode(AddChunks{"actor-0", "policy", 1, {1, 2, 3}})).status().code() ==
            Code::kPermissionDenied);
      CHECK(s.call(*c, encode(Heartbeat{"actor-0"})).status().code() == Code::kPermissionDenied);
      // Registering the actor's holder id as one's own is refused too.
      CHECK(s.call(*c, encode(reg("actor-0", 1))).status().code() == Code::kPermissionDenied);
    }
    CHECK(s.svc->store().state_digest() == before);
    CHECK_FALSE(s.svc->store().committed("policy", 1));
    // The owner may.
    CHECK(s.call(*actor, encode(AddChunks{"actor-0", "policy", 1, {1, 2, 3}})).is_ok());
    CHECK(s.svc->store().committed("policy", 1));
    CHECK(s.call(*actor, encode(u)).is_ok());
  }

  TEST_CASE("no key, a key outside the job: nothing reaches the store") {
    Store s;
    auto actor = s.client("actor");
    REQUIRE(s.call(*actor, encode(PutManifest{manifest(1)})).is_ok());
    REQUIRE(s.call(*actor, encode(reg("actor-0", 1))).is_ok());
    const std::string before = s.svc->store().state_digest();
    auto plain = core::Client::create(*s.loop, s.svc->endpoint(), core::Security::plain()).value();
    CHECK(never_answered(s.call(*plain, encode(reg("x", 2)), Millis(700))));
    CHECK(never_answered(s.call(*plain, encode(PlanRequest{"policy", 1, {}}), Millis(700))));
    core::Security outsider = s.outsiders.security("actor");
    outsider.server_key = s.keys.client_of("actor", core::kRoleWeightstore).server_key;
    auto out = core::Client::create(*s.loop, s.svc->endpoint(), outsider).value();
    CHECK(never_answered(s.call(*out, encode(PutManifest{manifest(2)}), Millis(700))));
    CHECK(never_answered(s.call(*out, encode(PlanRequest{"policy", 1, {}}), Millis(700))));
    CHECK(s.svc->store().state_digest() == before);
    // A member gets its plan.
    CHECK(s.call(*s.client("rollout-1"), encode(PlanRequest{"policy", 1, {}})).is_ok());
  }
}
