// The typed manager client against a real manager on loopback: each call's reply as the manager
// gave it, the status without waiting, and a status that never comes answered once, in time.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "core/event_loop.hpp"
#include "rollout/manager.hpp"
#include "rollout/manager_client.hpp"
#include "wire/security.hpp"

using namespace sluice;

namespace {

constexpr core::Millis kCall{5000};

rollout::ManagerConfig small_job() {
  rollout::ManagerConfig c;
  c.listen = "tcp://127.0.0.1:*";
  c.security.mode = "plain";
  c.mode = "sluice";
  c.prompts = 4;
  c.group_size = 2;
  c.batch_trajectories = 4;
  c.ahead_batches = 2;
  return c;
}

rollout::ReportRequest empty_report(const std::string& id, std::uint64_t version) {
  rollout::ReportRequest q;
  q.id = id;
  q.incarnation = "test";
  q.version = version;
  q.staged = version;
  q.capacity.max_sequences = 8;
  return q;
}

}  // namespace

TEST_CASE("the typed manager client: published, report, collect and status as the manager says") {
  auto loop = core::EventLoop::create().value();
  auto manager = rollout::Manager::create(*loop, small_job()).value();
  auto client =
      rollout::ManagerClient::create(*loop, manager->endpoint(), core::Security::plain(), kCall)
          .value();

  auto pub = client->published(rollout::PublishedRequest{1, 0}, core::Millis(0));
  REQUIRE_MESSAGE(pub.is_ok(), pub.status().to_string());
  CHECK(pub->latest == 1);

  bool answered = false;
  auto work = client->report(empty_report("r0", 1), core::Millis(0), &answered);
  REQUIRE_MESSAGE(work.is_ok(), work.status().to_string());
  CHECK(answered);
  // Four prompts of two: eight trajectories, at most the rollout's eight slots.
  CHECK(work->assign.size() == 8);

  rollout::CollectRequest nothing;
  nothing.max = 16;
  auto got = client->collect(nothing, core::Millis(0), &answered);
  REQUIRE(got.is_ok());
  CHECK(answered);
  CHECK(got->trajectories.empty());  // nothing finished yet
  CHECK_FALSE(got->done);

  auto st = client->status(core::Millis(0));
  REQUIRE(st.is_ok());
  CHECK(st->latest == 1);
  CHECK_FALSE(st->done);

  // The same status without waiting: answered on the loop, once.
  int calls = 0;
  std::optional<core::Result<rollout::ManagerStatus>> async;
  client->status_async(core::Millis(0), [&](core::Result<rollout::ManagerStatus> r) {
    ++calls;
    async = std::move(r);
  });
  CHECK(calls == 0);  // not before the loop runs
  loop->run_until([&] { return calls > 0; }, kCall);
  REQUIRE(calls == 1);
  REQUIRE(async->is_ok());
  CHECK((*async)->latest == 1);
  CHECK((*async)->fields.at("rollouts") == st->fields.at("rollouts"));
  CHECK((*async)->fields.at("released_prompts") == 4);
}

TEST_CASE("a status asked without waiting of a manager that is not there ends in an error, once") {
  auto loop = core::EventLoop::create().value();
  // A manager that was there and is gone: its port is free, nothing answers.
  std::string endpoint;
  {
    auto gone = rollout::Manager::create(*loop, small_job()).value();
    endpoint = gone->endpoint();
  }
  auto client =
      rollout::ManagerClient::create(*loop, endpoint, core::Security::plain(), kCall).value();
  const core::Millis timeout{300};
  int calls = 0;
  std::optional<core::Result<rollout::ManagerStatus>> got;
  const auto t0 = core::Clock::now();
  client->status_async(timeout, [&](core::Result<rollout::ManagerStatus> r) {
    ++calls;
    got = std::move(r);
  });
  loop->run_until([&] { return calls > 0; }, kCall);
  const auto waited = core::Clock::now() - t0;
  REQUIRE(calls == 1);
  CHECK_FALSE(got->is_ok());
  CHECK(waited >= timeout);
  CHECK(waited < kCall);
  // And nothing more arrives later.
  loop->run_until([] { return false; }, core::Millis(200));
  CHECK(calls == 1);
}
