// The store's authorization: who may send what (docs/architecture.md, "Authorization"). Every
// refusal leaves the store's state digest as it was.
#include <doctest/doctest.h>

#include <filesystem>
#include <optional>

#include "../support/job_keys.hpp"
#include "core/event_loop.hpp"
#include "weightstore/client.hpp"
#include "weightstore/protocol.hpp"
#include "weightstore/service.hpp"
#include "wire/messaging.hpp"

using namespace sluice;
using namespace sluice::weightstore;
using core::Code;
using core::Message;
using core::Millis;
using testing::JobKeys;
using testing::never_answered;

namespace {

// An unsigned manifest of `version` (what an older peer, or one that is not the actor, sends).
core::Manifest unsigned_manifest(std::uint64_t version) {
  std::vector<std::uint8_t> bytes(4096, static_cast<std::uint8_t>(version));
  core::TensorSpec t{"w", "F32", {1024}, 0, 4096};
  return core::make_manifest("policy", version, {t}, bytes.data(), bytes.size(), 1024).value();
}

core::Manifest signed_by(core::Manifest m, const core::SignKeyPair& key) {
  REQUIRE(core::sign_manifest(m, key).is_ok());
  return m;
}

HolderRegistration reg(const std::string& id, core::Manifest m) {
  HolderRegistration r;
  r.holder_id = id;
  r.endpoint = "tcp://127.0.0.1:9/" + id;
  r.descriptor = "descriptor of " + id;
  r.topology = {"host-" + id, "rack-1", "dc-1"};
  r.manifest = std::move(m);
  return r;
}

std::vector<std::pair<std::string, std::string>> two_of_each() {
  return {{"weightstore", core::kRoleWeightstore},
          {"rollout-manager", core::kRoleManager},
          {"actor", core::kRoleActor},
          {"relay-0", core::kRoleRelay},
          {"relay-1", core::kRoleRelay},
          {"rollout-0", core::kRoleRollout},
          {"rollout-1", core::kRoleRollout},
          {"operator", core::kRoleOperator}};
}

struct Store {
  JobKeys keys{two_of_each()};
  JobKeys outsiders;
  const core::SignKeyPair actor_key = keys.security("actor").sign;
  std::unique_ptr<core::EventLoop> loop = core::EventLoop::create().value();
  std::unique_ptr<StoreService> svc;
  Store() { start(); }
  // A fresh store process state: what a store that restarted knows (nothing).
  void start(const std::string& members_file = {}) {
    svc.reset();
    ServiceConfig cfg;
    cfg.listen = "tcp://127.0.0.1:*";
    cfg.security = keys.config("weightstore");
    if (!members_file.empty()) cfg.security.members_file = members_file;
    cfg.max_version_ahead = 1000;
    svc = StoreService::create(*loop, cfg).value();
  }
  // The actor's manifest of `version`, signed as its publisher signs it.
  core::Manifest manifest(std::uint64_t version) const {
    return signed_by(unsigned_manifest(version), actor_key);
  }
  HolderRegistration reg(const std::string& id, std::uint64_t version) const {
    return ::reg(id, manifest(version));
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
  TEST_CASE("a holder id is its identity's: nobody takes one, even one the store does not know") {
    Store s;
    auto actor = s.client("actor");
    REQUIRE(s.call(*actor, encode(PutManifest{s.manifest(1)})).is_ok());
    REQUIRE(s.call(*actor, encode(s.reg("actor-0", 1))).is_ok());
    // The store restarts (or actor-0 expired while its process was down): it knows no holder,
    // and the first to register under actor-0's id used to get it.
    s.start();
    actor = s.client("actor");
    auto rollout = s.client("rollout-0");
    REQUIRE(s.call(*actor, encode(PutManifest{s.manifest(1)})).is_ok());
    const std::string before = s.svc->store().state_digest();
    for (const char* id : {"actor-0", "actor-1", "relay-0", "rollout-1", "rollout-0x"}) {
      CAPTURE(id);
      auto r = s.call(*rollout, encode(s.reg(id, 1)));
      CHECK(r.status().code() == Code::kPermissionDenied);
      CHECK(r.status().message().find("is not rollout-0's") != std::string::npos);
      DeltaRegistration d;
      d.holder_id = id;
      d.delta = {"policy", 1, 2, 1024, 1024, {1}};
      CHECK(s.call(*rollout, encode(d)).status().code() == Code::kPermissionDenied);
    }
    CHECK(s.svc->store().state_digest() == before);
    // The real holders register as before, under their identity or identity-suffix ids.
    CHECK(s.call(*actor, encode(s.reg("actor-0", 1))).is_ok());
    CHECK(s.call(*rollout, encode(s.reg("rollout-0", 1))).is_ok());
    CHECK(s.call(*rollout, encode(s.reg("rollout-0-spare", 1))).is_ok());
    // And acting for a holder by id is checked the same way.
    CHECK(s.call(*rollout, encode(Heartbeat{"actor-0"})).status().code() ==
          Code::kPermissionDenied);
  }

  TEST_CASE(
      "only the actor puts manifests: a rollout cannot bring a version: refusals change nothing") {
    Store s;
    auto actor = s.client("actor");
    auto rollout = s.client("rollout-0");
    auto relay = s.client("relay-0");
    REQUIRE(s.call(*actor, encode(PutManifest{s.manifest(1)})).is_ok());
    REQUIRE(s.call(*actor, encode(s.reg("actor-0", 1))).is_ok());
    const std::string before = s.svc->store().state_digest();

    auto r1 = s.call(*rollout, encode(PutManifest{s.manifest(2)}));
    CHECK(r1.status().code() == Code::kPermissionDenied);
    auto r2 = s.call(*relay, encode(PutManifest{s.manifest(2)}));
    CHECK(r2.status().code() == Code::kPermissionDenied);
    // A registration of an unknown version would create it: not a rollout's to do.
    auto r3 = s.call(*rollout, encode(s.reg("rollout-0", 2)));
    CHECK(r3.status().code() == Code::kPermissionDenied);
    CHECK(r3.status().message().find("new version") != std::string::npos);
    // Relay-only requests.
    auto r4 = s.call(*rollout, encode(JoinRelay{"rollout-0", {}}));
    CHECK(r4.status().code() == Code::kPermissionDenied);
    CHECK(s.svc->store().state_digest() == before);
    CHECK_FALSE(s.svc->store().knows("policy", 2));
    // What a rollout may do: read the latest, register a copy of a known version.
    CHECK(s.call(*rollout, encode(LatestRequest{"policy", 0, 0})).is_ok());
    CHECK(s.call(*rollout, encode(s.reg("rollout-0", 1))).is_ok());
  }

  TEST_CASE("only the identity that registered a copy unpublishes it or reports for it") {
    Store s;
    auto actor = s.client("actor");
    auto rollout = s.client("rollout-0");
    auto relay = s.client("relay-0");
    REQUIRE(s.call(*actor, encode(PutManifest{s.manifest(1)})).is_ok());
    HolderRegistration partial = s.reg("actor-0", 1);
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
      CHECK(r.status().message().find("holder id 'actor-0' is not") != std::string::npos);
      CHECK(s.call(*c, encode(AddChunks{"actor-0", "policy", 1, {1, 2, 3}})).status().code() ==
            Code::kPermissionDenied);
      CHECK(s.call(*c, encode(Heartbeat{"actor-0"})).status().code() == Code::kPermissionDenied);
      // Registering the actor's holder id as one's own is refused too.
      CHECK(s.call(*c, encode(s.reg("actor-0", 1))).status().code() == Code::kPermissionDenied);
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
    REQUIRE(s.call(*actor, encode(PutManifest{s.manifest(1)})).is_ok());
    REQUIRE(s.call(*actor, encode(s.reg("actor-0", 1))).is_ok());
    const std::string before = s.svc->store().state_digest();
    auto plain = core::Client::create(*s.loop, s.svc->endpoint(), core::Security::plain()).value();
    CHECK(never_answered(s.call(*plain, encode(s.reg("x", 2)), Millis(700))));
    CHECK(never_answered(s.call(*plain, encode(PlanRequest{"policy", 1, {}}), Millis(700))));
    core::Security outsider = s.outsiders.security("actor");
    outsider.server_key = s.keys.client_of("actor", core::kRoleWeightstore).server_key;
    auto out = core::Client::create(*s.loop, s.svc->endpoint(), outsider).value();
    CHECK(never_answered(s.call(*out, encode(PutManifest{s.manifest(2)}), Millis(700))));
    CHECK(never_answered(s.call(*out, encode(PlanRequest{"policy", 1, {}}), Millis(700))));
    CHECK(s.svc->store().state_digest() == before);
    // A member gets its plan.
    CHECK(s.call(*s.client("rollout-1"), encode(PlanRequest{"policy", 1, {}})).is_ok());
  }

  // A registration of an unknown version used to create it, whoever sent it
  // and whatever its checksums; a huge version number then blocked the actor's next publish.
  TEST_CASE("a relay's key cannot bring a version: not a new one, not a forged one") {
    Store s;
    auto actor = s.client("actor");
    REQUIRE(s.call(*actor, encode(PutManifest{s.manifest(1)})).is_ok());
    REQUIRE(s.call(*actor, encode(s.reg("actor-0", 1))).is_ok());
    REQUIRE(s.svc->store().committed("policy", 1));
    const core::SignKeyPair relay_key = core::make_sign_key_pair().value();

    // Each of these is what a relay's key could send, on a live store and on one that restarted
    // and learns its versions back from holders; none may make a version.
    auto forgeries = [&](const std::string& when) {
      CAPTURE(when);
      auto relay = s.client("relay-0");  // of the store running now
      const std::string before = s.svc->store().state_digest();
      std::vector<std::pair<std::string, core::Manifest>> tries;
      tries.emplace_back("unsigned, new", unsigned_manifest(2));
      tries.emplace_back("signed by the relay's own key",
                         signed_by(unsigned_manifest(2), relay_key));
      core::Manifest copied = unsigned_manifest(2);
      copied.signature = s.manifest(1).signature;  // the actor's signature of another version
      tries.emplace_back("the actor's signature of version 1 on version 2", copied);
      core::Manifest wrong = s.manifest(1);
      wrong.checksums[0] ^= 0xdead;  // valid structure, checksums of the relay's choosing
      tries.emplace_back("version 1 with other checksums", wrong);
      core::Manifest huge = unsigned_manifest(2);
      huge.version = UINT64_MAX;
      tries.emplace_back("UINT64_MAX, unsigned", huge);
      for (const auto& tried : tries) {
        const core::Manifest& m = tried.second;
        CAPTURE(tried.first);
        auto r = s.call(*relay, encode(reg("relay-0", m)));
        CHECK_FALSE(r.is_ok());
        CHECK((r.status().code() == Code::kPermissionDenied ||
               r.status().code() == Code::kInvalidArgument));
        CHECK(s.call(*relay, encode(PutManifest{m})).status().code() == Code::kPermissionDenied);
      }
      CHECK(s.svc->store().state_digest() == before);
      CHECK_FALSE(s.svc->store().knows("policy", 2));
      CHECK_FALSE(s.svc->store().knows("policy", UINT64_MAX));
    };
    forgeries("live store");
    auto relay = s.client("relay-0");
    // The reason is said: an unsigned manifest (an older peer) is refused as unsigned.
    auto old = s.call(*relay, encode(reg("relay-0", unsigned_manifest(3))));
    CHECK(old.status().code() == Code::kPermissionDenied);
    CHECK(old.status().message().find("policy@3 is not signed") != std::string::npos);
    // The actor's next publish goes through.
    CHECK(s.call(*actor, encode(PutManifest{s.manifest(2)})).is_ok());

    s.start();  // a restarted store: it knows nothing and learns from re-registrations
    forgeries("restarted store");
    // What a relay may still do after a restart: bring back a version the actor signed.
    relay = s.client("relay-0");
    auto back = s.call(*relay, encode(s.reg("relay-0", 1)));
    REQUIRE_MESSAGE(back.is_ok(), back.status().to_string());
    CHECK(s.svc->store().committed("policy", 1));
    CHECK(s.svc->store().latest("policy").value() == 1);
  }

  TEST_CASE("version numbers are bounded: no 2^53 and beyond, no jump far past the newest") {
    Store s;
    auto actor = s.client("actor");
    auto relay = s.client("relay-0");
    // Even the actor's own signature does not make these versions.
    for (std::uint64_t v : {UINT64_MAX, std::uint64_t(1) << 53, (std::uint64_t(1) << 53) + 1}) {
      CAPTURE(v);
      auto r = s.call(*actor, encode(PutManifest{s.manifest(v)}));
      CHECK(r.status().code() == Code::kInvalidArgument);
      CHECK(r.status().message().find("below 2^53") != std::string::npos);
      CHECK(s.call(*relay, encode(s.reg("relay-0", v))).status().code() == Code::kInvalidArgument);
    }
    REQUIRE(s.call(*actor, encode(PutManifest{s.manifest(5)})).is_ok());
    REQUIRE(s.call(*actor, encode(s.reg("actor-0", 5))).is_ok());
    // max_version_ahead is 1000 in this store: 1005 may come, 1006 may not.
    auto far = s.call(*actor, encode(PutManifest{s.manifest(1006)}));
    CHECK(far.status().code() == Code::kInvalidArgument);
    CHECK(far.status().message().find("max_version_ahead") != std::string::npos);
    CHECK(s.call(*relay, encode(s.reg("relay-0", 1006))).status().code() == Code::kInvalidArgument);
    CHECK_FALSE(s.svc->store().knows("policy", 1006));
    CHECK(s.call(*actor, encode(PutManifest{s.manifest(1005)})).is_ok());
    // A store that knows nothing (it restarted) measures from nothing: below 2^53 is enough.
    s.start();
    relay = s.client("relay-0");
    CHECK(s.call(*relay, encode(s.reg("relay-0", 7000))).is_ok());
    CHECK(s.svc->store().latest("policy").value() == 7000);
  }

  TEST_CASE("a reader refuses a version whose signature does not verify, even from the store") {
    Store s;
    // A store that trusts another key for the actor (its members file was tampered with, or the
    // store itself is not to be trusted): it accepts a version the actor never signed.
    const core::SignKeyPair mallory = core::make_sign_key_pair().value();
    core::Members tampered;
    const core::Members real = core::read_members_file(core::members_file_path(s.keys.dir)).value();
    for (core::Member m : real.all()) {
      if (m.role == core::kRoleActor) m.sign_key = mallory.public_key;
      REQUIRE(tampered.add(m).is_ok());
    }
    const std::string tampered_file = s.keys.dir + "/tampered-members.json";
    REQUIRE(core::write_members_file(tampered_file, tampered).is_ok());
    s.start(tampered_file);
    auto actor = s.client("actor");
    core::Manifest forged = signed_by(unsigned_manifest(1), mallory);
    REQUIRE(s.call(*actor, encode(PutManifest{forged})).is_ok());
    REQUIRE(s.call(*actor, encode(reg("actor-0", forged))).is_ok());
    REQUIRE(s.svc->store().committed("policy", 1));

    // A rollout's store client, with the job's real members file, gets the plan and refuses it.
    auto reader =
        StoreClient::create(*s.loop, s.svc->endpoint(), s.keys.security("rollout-0")).value();
    for (std::uint64_t asked : {std::uint64_t(1), std::uint64_t(0)}) {
      auto plan = reader->plan("policy", asked, {});
      CHECK(plan.status().code() == Code::kPermissionDenied);
      CHECK(plan.status().message().find("not an actor's signature") != std::string::npos);
      std::optional<core::Result<ReadPlan>> async;
      reader->plan_async(PlanRequest{"policy", asked, {}}, Millis(5000),
                         [&async](core::Result<ReadPlan> p) { async.emplace(std::move(p)); });
      REQUIRE(s.loop->run_until([&] { return async.has_value(); }, Millis(5000)));
      CHECK(async->status().code() == Code::kPermissionDenied);
    }
    // The leases those plans took are given back at once: the copy is not held by a refusal.
    CHECK(s.loop->run_until([&] { return s.svc->store().active_leases("actor-0") == 0; },
                            Millis(5000)));
  }

  // Ids that name the caller were taken from the body.
  TEST_CASE("a member acts only as itself: pins, relay joins and chain reads, leases") {
    Store s;
    auto actor = s.client("actor");
    auto rollout0 = s.client("rollout-0");
    auto rollout1 = s.client("rollout-1");
    auto relay0 = s.client("relay-0");
    auto relay1 = s.client("relay-1");
    REQUIRE(s.call(*actor, encode(PutManifest{s.manifest(1)})).is_ok());
    REQUIRE(s.call(*actor, encode(s.reg("actor-0", 1))).is_ok());
    Pin pin;
    pin.model = "policy";
    pin.version = 1;
    pin.owner = "rollout-0";
    REQUIRE(s.call(*rollout0, encode(pin)).is_ok());
    REQUIRE(s.call(*relay0, encode(JoinRelay{"relay-0", {}})).is_ok());
    auto plan = s.call(*rollout0, encode(PlanRequest{"policy", 1, {}}));
    REQUIRE(plan.is_ok());
    const std::uint64_t lease = decode_plan(*plan).value().lease_id;
    const std::string before = s.svc->store().state_digest();

    auto refused = [](const core::Result<Message>& r, const std::string& what) {
      CAPTURE(what);
      CHECK(r.status().code() == Code::kPermissionDenied);
    };
    Unpin unpin;
    static_cast<PinRef&>(unpin) = pin;
    refused(s.call(*rollout1, encode(unpin)), "rollout-1 unpins rollout-0's pin");
    refused(s.call(*rollout1, encode(pin)), "rollout-1 pins in rollout-0's name");
    auto join = s.call(*relay1, encode(JoinRelay{"relay-0", {"elsewhere", "", ""}}));
    refused(join, "relay-1 joins as relay-0");
    CHECK(join.status().message().find("'relay_id' is relay-0, but the caller is relay-1") !=
          std::string::npos);
    ChainSourceRequest chain;
    chain.model = "policy";
    chain.version = 1;
    chain.relay_id = "relay-0";
    refused(s.call(*relay1, encode(chain)), "relay-1 asks for a source as relay-0");
    Renew renew;
    renew.lease_id = lease;
    Release release;
    release.lease_id = lease;
    auto r = s.call(*rollout1, encode(renew));
    refused(r, "rollout-1 renews rollout-0's lease");
    CHECK(r.status().message().find("taken by rollout-0, not by rollout-1") != std::string::npos);
    refused(s.call(*rollout1, encode(release)), "rollout-1 releases rollout-0's lease");
    refused(s.call(*relay1, encode(release)), "relay-1 releases rollout-0's lease");
    // Nothing changed: the pin, the relay chain, the lease and its expiry are as they were.
    CHECK(s.svc->store().state_digest() == before);
    CHECK(s.svc->store().active_leases("actor-0") == 1);

    // Each member may do all of it as itself.
    CHECK(s.call(*relay0, encode(chain)).is_ok());
    CHECK(s.call(*rollout0, encode(renew)).is_ok());
    CHECK(s.call(*rollout0, encode(release)).is_ok());
    CHECK(s.svc->store().active_leases("actor-0") == 0);
    CHECK(s.call(*rollout0, encode(unpin)).is_ok());
    CHECK(s.call(*relay1, encode(JoinRelay{"relay-1", {}})).is_ok());
  }
}
