// The rollout manager's authorization (docs/architecture.md, "Authorization"): only the actor
// collects, acknowledges and announces versions, a rollout reports only as itself, and nobody
// outside the job reaches it. Every refusal leaves the state digest as it was.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "../support/job_keys.hpp"
#include "core/event_loop.hpp"
#include "rollout/manager.hpp"
#include "wire/messaging.hpp"

using namespace sluice;
using core::Code;
using core::Message;
using core::Millis;
using nlohmann::json;
using testing::JobKeys;
using testing::never_answered;

namespace {

json report_body(const std::string& id) {
  return json{{"id", id},
              {"version", 1},
              {"staged", 1},
              {"loading", false},
              {"capacity", {{"max_sequences", 8}, {"max_kv_tokens", 65536}}},
              {"active", json::array()},
              {"queued", json::array()},
              {"finished", json::array()},
              {"exported", json::array()},
              {"returned", json::array()}};
}

struct Harness {
  JobKeys keys;
  JobKeys outsiders;
  std::unique_ptr<core::EventLoop> loop = core::EventLoop::create().value();
  std::unique_ptr<rollout::Manager> manager;
  Harness() {
    rollout::ManagerConfig cfg;
    cfg.listen = "tcp://127.0.0.1:*";
    cfg.prompts = 16;
    cfg.group_size = 2;
    cfg.batch_trajectories = 4;
    cfg.security = keys.config("rollout-manager");
    manager = rollout::Manager::create(*loop, cfg).value();
  }
  std::unique_ptr<core::Client> client(const std::string& identity) {
    return core::Client::create(*loop, manager->endpoint(),
                                keys.client_of(identity, core::kRoleManager))
        .value();
  }
};

}  // namespace

TEST_SUITE("rollout.manager.auth") {
  TEST_CASE("only the actor collects and announces: a rollout reports only as itself") {
    Harness h;
    auto actor = h.client("actor");
    auto r0 = h.client("rollout-0");
    auto relay = h.client("relay-0");
    auto op = h.client("operator");
    REQUIRE(
        actor->call(Message("mgr.published", json{{"version", 1}, {"consumed", 0}}), Millis(5000))
            .is_ok());
    REQUIRE(r0->call(Message("mgr.report", report_body("rollout-0")), Millis(5000)).is_ok());
    const std::string before = h.manager->state_digest();

    for (auto* c : {r0.get(), relay.get(), op.get()}) {
      auto collect = c->call(Message("mgr.collect", json{{"max", 16}}), Millis(5000));
      CHECK(collect.status().code() == Code::kPermissionDenied);
      auto pub =
          c->call(Message("mgr.published", json{{"version", 2}, {"consumed", 0}}), Millis(5000));
      CHECK(pub.status().code() == Code::kPermissionDenied);
    }
    // Reports are the rollouts': not the actor's, and a rollout never as another one.
    CHECK(actor->call(Message("mgr.report", report_body("rollout-0")), Millis(5000))
              .status()
              .code() == Code::kPermissionDenied);
    auto as_other = r0->call(Message("mgr.report", report_body("rollout-1")), Millis(5000));
    CHECK(as_other.status().code() == Code::kPermissionDenied);
    CHECK(as_other.status().message().find("only as itself") != std::string::npos);
    CHECK(h.manager->state_digest() == before);
    // Status is for every member.
    CHECK(op->call(Message("mgr.status", json::object()), Millis(5000)).is_ok());
    CHECK(actor->call(Message("mgr.collect", json{{"max", 16}}), Millis(5000)).is_ok());
  }

  TEST_CASE("no key or a key outside the job: nothing reaches the manager") {
    Harness h;
    const std::string before = h.manager->state_digest();
    auto plain =
        core::Client::create(*h.loop, h.manager->endpoint(), core::Security::plain()).value();
    CHECK(never_answered(
        plain->call(Message("mgr.published", json{{"version", 3}, {"consumed", 0}}), Millis(700))));
    core::Security outsider = h.outsiders.security("actor");
    outsider.server_key = h.keys.client_of("actor", core::kRoleManager).server_key;
    auto out = core::Client::create(*h.loop, h.manager->endpoint(), outsider).value();
    CHECK(never_answered(
        out->call(Message("mgr.published", json{{"version", 3}, {"consumed", 0}}), Millis(700))));
    CHECK(never_answered(out->call(Message("mgr.report", report_body("rollout-0")), Millis(700))));
    CHECK(h.manager->state_digest() == before);
  }
}
