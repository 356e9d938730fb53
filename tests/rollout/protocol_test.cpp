// The manager's messages as the actor and the launcher use them: what is encoded decodes to the
// same values, and a reply that is not what the protocol says is refused with the field named.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "rl/trajectory.hpp"
#include "rollout/protocol.hpp"

using namespace sluice;
using nlohmann::json;

TEST_SUITE("rollout.protocol") {
  TEST_CASE("a collect request and its reply decode to what was encoded") {
    rollout::CollectRequest q;
    q.ack = {"p0/0", "p0/1"};
    q.have = std::vector<std::string>{"p1/0"};
    q.consumed = 7;
    q.max = 32;
    q.epoch = "e42";
    core::Message m = rollout::encode(q);
    CHECK(m.type == "mgr.collect");
    auto back = rollout::decode_collect(m.body);
    REQUIRE_MESSAGE(back.is_ok(), back.status().to_string());
    CHECK(back->ack == q.ack);
    CHECK(back->have == q.have);
    CHECK(back->consumed == 7);
    CHECK(back->max == 32);
    CHECK(back->epoch == q.epoch);

    rl::Trajectory t;
    t.id = "p3/2";
    t.prompt_id = "p3";
    t.version = 4;
    t.versions = {4};
    t.prompt_tokens = {1, 2, 3};
    t.response_tokens = {5, 6};
    t.logprobs = {-0.5f, -1.25f};
    t.reward = 1.0;
    rollout::CollectReply r;
    r.trajectories = {t};
    r.done = true;
    auto rb = rollout::decode_collect_reply(rollout::encode(r).body);
    REQUIRE_MESSAGE(rb.is_ok(), rb.status().to_string());
    REQUIRE(rb->trajectories.size() == 1);
    CHECK(rb->trajectories[0].id == "p3/2");
    CHECK(rb->trajectories[0].response_tokens == t.response_tokens);
    CHECK(rb->trajectories[0].logprobs == t.logprobs);
    CHECK(rb->done);
  }

  TEST_CASE("published and status replies decode, and malformed ones are refused by field") {
    auto p = rollout::decode_published_reply(rollout::encode(rollout::PublishedReply{9}).body);
    REQUIRE(p.is_ok());
    CHECK(p->latest == 9);
    auto no_latest = rollout::decode_published_reply(json::object());
    REQUIRE_FALSE(no_latest.is_ok());
    CHECK(no_latest.status().message().find("latest") != std::string::npos);
    CHECK_FALSE(rollout::decode_published_reply(json{{"latest", -1}}).is_ok());
    CHECK_FALSE(rollout::decode_published_reply(json{{"latest", "9"}}).is_ok());

    rollout::ManagerStatus s;
    s.done = true;
    s.latest = 3;
    s.fields = json{{"finished", 12}, {"consumed", 8}};
    core::Message sm = rollout::encode(s);
    CHECK(sm.type == "mgr.status");
    auto sb = rollout::decode_status(sm.body);
    REQUIRE(sb.is_ok());
    CHECK(sb->done);
    CHECK(sb->latest == 3);
    CHECK(sb->fields.at("finished") == 12);
    CHECK_FALSE(rollout::decode_status(json::array()).is_ok());
    auto bad_done = rollout::decode_status(json{{"done", "yes"}});
    REQUIRE_FALSE(bad_done.is_ok());
    CHECK(bad_done.status().message().find("done") != std::string::npos);
    CHECK(rollout::encode(rollout::StatusRequest{}).type == "mgr.status");
  }

  TEST_CASE(
      "numbers out of a field's range are refused by name, not converted (found by fuzzing)") {
    // fuzz_rollout_protocol: a finished trajectory with "versions": [-1.0] reached nlohmann's
    // get<std::uint64_t>(), a conversion with undefined behaviour.
    rl::Trajectory t;
    t.id = "p0/0";
    t.prompt_id = "p0";
    t.version = 1;
    t.versions = {1};
    t.response_tokens = {5};
    t.logprobs = {-0.5f};
    json good = t.to_json();
    REQUIRE(rl::Trajectory::from_json(good).is_ok());
    auto refused = [&](const char* key, json value, const char* expected) {
      json j = good;
      j[key] = std::move(value);
      auto r = rl::Trajectory::from_json(j);
      REQUIRE_FALSE(r.is_ok());
      CHECK_MESSAGE(r.status().message().find(std::string("'") + key + "' must be " + expected) !=
                        std::string::npos,
                    r.status().message());
    };
    refused("versions", json::array({-1.0}), "an array of non-negative integers");
    refused("versions", json::array({-1}), "an array of non-negative integers");
    refused("version", 1.5, "a non-negative integer");
    refused("response_tokens", json::array({4294967296LL}), "an array of 32-bit integers");
    refused("logprobs", json::array({1e300}), "an array of finite numbers within float's range");
    refused("reward", "1", "a finite number");
    refused("abandoned", 1, "true or false");

    json report{{"id", "r0"},
                {"version", 1},
                {"staged", 1},
                {"capacity", {{"max_sequences", 8}, {"max_kv_tokens", 1024}}},
                {"active", json::array()},
                {"queued", json::array()},
                {"finished", json::array({good})},
                {"exported", json::array()}};
    REQUIRE(rollout::decode_report(report).is_ok());
    report["finished"][0]["versions"] = json::array({-1.0});
    auto r = rollout::decode_report(report);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message().find("finished[0]") != std::string::npos);
  }
}

TEST_SUITE("rollout.protocol") {
  TEST_CASE(
      "reports carry held trajectories in bounded prefixes: each under the header limit, "
      "all of them in the end") {
    // As after a manager outage: a rollout holds 300 finished trajectories of 1,000 tokens each,
    // about 9 MB as JSON, far more than one message's 1 MiB header.
    std::vector<rl::Trajectory> held;
    for (int i = 0; i < 300; ++i) {
      rl::Trajectory t;
      t.id = "p" + std::to_string(i) + "/0";
      t.prompt_id = "p" + std::to_string(i);
      t.version = 3;
      t.versions = {3};
      t.prompt_tokens.assign(24, 7);
      t.response_tokens.assign(1000, 123456);
      t.logprobs.assign(1000, -1.2345678f);
      t.rollout = "rollout-0";
      held.push_back(std::move(t));
    }
    std::size_t reports = 0, sent = 0;
    while (!held.empty()) {
      std::size_t n = rollout::fitting_prefix(held);
      REQUIRE(n >= 1);
      rollout::ReportRequest r;
      r.id = "rollout-0";
      r.finished.assign(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(n));
      const std::string header = rollout::encode(r).body.dump();
      CHECK(header.size() < (1u << 20));
      sent += n;
      held.erase(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(n));
      ++reports;
    }
    CHECK(sent == 300);
    CHECK(reports > 1);
    // One trajectory larger than the bound still goes (alone), never stuck.
    rl::Trajectory big;
    big.id = "p9/0";
    big.response_tokens.assign(40000, 1);
    std::vector<rl::Trajectory> one{big, big};
    CHECK(rollout::fitting_prefix(one) == 1);
  }
}
