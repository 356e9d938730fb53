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
}
