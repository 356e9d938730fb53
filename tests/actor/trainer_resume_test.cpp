// A trainer that resumes from its checkpoint, against a real store process and a stand-in
// manager served on the test's loop: it refuses (and acknowledges again) what it had consumed,
// trains on the rest, publishes its first version above everything the store has seen, and
// reports every trajectory exactly once.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "../support/store_process.hpp"
#include "../support/test_weights.hpp"
#include "actor/checkpoint.hpp"
#include "actor/publisher.hpp"
#include "actor/sim_policy.hpp"
#include "actor/trainer.hpp"
#include "rl/trajectory.hpp"
#include "rollout/protocol.hpp"
#include "weightstore/client.hpp"
#include "wire/messaging.hpp"
#include "wire/transfer.hpp"

using namespace sluice;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The manager's side of mgr.collect as the actor sees it, in the manager's typed messages:
// trajectories p0/0 .. p(n-1)/0 of version 1, each sent once per epoch unless acknowledged;
// `have` and `ack` recorded.
struct FakeManager {
  std::unique_ptr<core::Server> server;
  std::size_t n = 0;
  std::set<std::string> acked;
  std::map<std::string, std::set<std::string>> sent;  // by epoch
  std::vector<std::string> epochs;
  std::vector<std::uint64_t> published;

  FakeManager(core::EventLoop& loop, std::size_t count) : n(count) {
    server = core::Server::create(loop, "tcp://127.0.0.1:*", core::Security::plain()).value();
    server->on_sync("mgr.collect", [this](const core::Message& m) -> core::Result<core::Message> {
      SLUICE_ASSIGN_OR_RETURN(rollout::CollectRequest q, rollout::decode_collect(m.body));
      REQUIRE(q.epoch.has_value());
      REQUIRE(q.have.has_value());
      if (epochs.empty() || epochs.back() != *q.epoch) epochs.push_back(*q.epoch);
      acked.insert(q.ack.begin(), q.ack.end());
      rollout::CollectReply out;
      auto& to_epoch = sent[*q.epoch];
      for (std::size_t i = 0; i < n && out.trajectories.size() < q.max; ++i) {
        std::string id = "p" + std::to_string(i) + "/0";
        if (acked.count(id) > 0 || to_epoch.count(id) > 0) continue;
        rl::Trajectory t;
        t.id = id;
        t.prompt_id = "p" + std::to_string(i);
        t.version = 1;
        t.prompt_tokens = {1, 2};
        t.response_tokens = {3, 4, 5};
        t.logprobs = {-1.0f, -1.0f, -1.0f};
        out.trajectories.push_back(std::move(t));
        to_epoch.insert(id);
      }
      out.done = to_epoch.size() + acked.size() >= n;
      return rollout::encode(out);
    });
    server->on_sync("mgr.published", [this](const core::Message& m) -> core::Result<core::Message> {
      SLUICE_ASSIGN_OR_RETURN(rollout::PublishedRequest q, rollout::decode_published(m.body));
      published.push_back(q.version);
      return rollout::encode(rollout::PublishedReply{q.version});
    });
  }
};

std::set<std::string> as_set(const json& ids) {
  std::set<std::string> s;
  for (const auto& id : ids)
    s.insert(id.get<std::string>());
  return s;
}

}  // namespace

TEST_SUITE("actor.trainer") {
  TEST_CASE("a resumed trainer publishes above the store's latest and consumes each id once") {
    testing::StoreProcess store;
    auto loop = core::EventLoop::create().value();
    FakeManager mgr(*loop, 6);
    fs::path dir = fs::temp_directory_path() / ("sluice-resume-" + std::to_string(::getpid()));
    fs::remove_all(dir);

    actor::TrainerConfig cfg;
    cfg.security.mode = "plain";
    cfg.manager = mgr.server->endpoint();
    cfg.store = store.endpoint;
    cfg.batch_trajectories = 2;
    cfg.group_size = 1;
    cfg.max_staleness = 100;
    cfg.weight_bytes = 4096;
    cfg.chunk_bytes = 1024;
    cfg.train_ms_per_token = 0;
    cfg.collect_ms = 5;
    cfg.checkpoint_dir = dir.string();
    cfg.checkpoint_every_steps = 1;

    // The first incarnation: two steps of two, then it stops (as if killed right after its
    // checkpoint); t4 and t5 were received but not consumed.
    cfg.steps = 2;
    {
      auto t = actor::Trainer::create(*loop, cfg, {});
      REQUIRE_MESSAGE(t.is_ok(), t.status().to_string());
      auto s = (*t)->run();
      REQUIRE_MESSAGE(s.is_ok(), s.status().to_string());
      CHECK(s->at("steps") == 2);
      CHECK(s->at("version") == 3);
      CHECK(s->at("restarts") == 0);
      CHECK(as_set(s->at("accepted_ids")) == std::set<std::string>{"p0/0", "p1/0", "p2/0", "p3/0"});
    }
    CHECK(mgr.acked == std::set<std::string>{"p0/0", "p1/0", "p2/0", "p3/0"});
    CHECK(mgr.published == std::vector<std::uint64_t>{1, 2, 3});

    // Meanwhile versions up to 12 were committed (the killed incarnation published past its
    // checkpoint), and the manager lost the acknowledgements: it sends everything again.
    auto engine = core::TransferEngine::create(*loop, {}).value();
    auto client =
        weightstore::StoreClient::create(*loop, store.endpoint, core::Security::plain()).value();
    actor::PublisherOptions po;
    po.model = "policy";
    po.holder_id = "ghost";
    po.chunk_bytes = 1024;
    auto ghost = actor::Publisher::create(*loop, *engine, *client, po).value();
    for (std::uint64_t v = 4; v <= 12; ++v) {
      auto w = testing::weights(v, 4096);
      REQUIRE(ghost->publish(v, testing::views(w)).is_ok());
    }
    REQUIRE(client->latest("policy").value() == 12);
    mgr.acked.clear();
    mgr.published.clear();

    cfg.steps = 0;  // until the manager is done
    auto t = actor::Trainer::create(*loop, cfg, {});
    REQUIRE_MESSAGE(t.is_ok(), t.status().to_string());
    auto s = (*t)->run();
    REQUIRE_MESSAGE(s.is_ok(), s.status().to_string());
    // Strictly above every version the store has seen, and above the checkpoint's.
    REQUIRE_FALSE(mgr.published.empty());
    CHECK(mgr.published.front() == 13);
    CHECK(s->at("restarts") == 1);
    CHECK(s->at("resumed_from_step") == 2);
    CHECK(s->at("steps") == 3);
    CHECK(s->at("trained_samples") == 6);
    CHECK(s->at("duplicates") == 4);  // t0..t3, refused
    CHECK(s->at("accepted") == 6);
    const std::set<std::string> all{"p0/0", "p1/0", "p2/0", "p3/0", "p4/0", "p5/0"};
    CHECK(s->at("accepted_ids").size() == 6);
    CHECK(as_set(s->at("accepted_ids")) == all);
    CHECK(as_set(s->at("trained_ids")) == all);
    // Everything durable was acknowledged, the refused copies included; two epochs seen.
    CHECK(mgr.acked == all);
    CHECK(mgr.epochs.size() == 2);

    // The newest checkpoint holds the restored weights plus one update: 3 updates in all.
    auto ck = actor::read_checkpoint((dir / actor::kCheckpointFile).string());
    REQUIRE_MESSAGE(ck.is_ok(), ck.status().to_string());
    CHECK(ck->steps == 3);
    CHECK(ck->restarts == 1);
    CHECK(ck->version == s->at("version").get<std::uint64_t>());
    actor::SimPolicyOptions so;
    so.weight_bytes = cfg.weight_bytes;
    auto p = actor::make_sim_policy(so);
    REQUIRE(p->load_state((dir / ck->policy_file).string()).is_ok());
    std::uint64_t updates = 0;
    std::memcpy(&updates, p->tensors().at(0).data, sizeof(updates));
    CHECK(updates == 3);
    fs::remove_all(dir);
  }
}
