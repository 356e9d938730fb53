// The manager's prompt pool on its own. The test plays the manager around it and checks what a
// user would: prompts released in order and whole groups, never more ahead of the actor than
// admission allows, a group complete once, a doomed group doomed once, and a restarted pool
// rebuilding exactly what it released.
#include <doctest/doctest.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rl/task.hpp"
#include "rollout/prompt_pool.hpp"

using namespace sluice;
using rollout::Admission;
using rollout::ManagerChanges;
using rollout::ManagerConfig;
using rollout::ManagerSnapshot;
using rollout::Mode;
using rollout::PromptPool;
using rollout::SequenceState;

namespace {

ManagerConfig job(std::uint64_t prompts, std::uint32_t group_size, std::uint32_t batch) {
  ManagerConfig cfg;
  cfg.mode = "stream";
  cfg.prompts = prompts;
  cfg.group_size = group_size;
  cfg.batch_trajectories = batch;
  cfg.ahead_batches = 1;
  cfg.backlog_batches = 1;
  cfg.prompt_tokens = 8;
  cfg.max_new_tokens = 64;
  REQUIRE(cfg.validate().is_ok());
  return cfg;
}

std::vector<std::string> ids_of(const std::vector<SequenceState>& group) {
  std::vector<std::string> out;
  for (const auto& s : group)
    out.push_back(s.trajectory_id);
  return out;
}

// Releases groups until the pool refuses; returns how many it released.
int release_all(PromptPool& pool) {
  int n = 0;
  while (!pool.release().empty())
    ++n;
  return n;
}

}  // namespace

TEST_CASE("manager prompt pool: prompts are released in order, each as a whole group") {
  PromptPool pool(job(3, 2, 4), Mode::kStream, Admission::kContinuous, std::nullopt);
  CHECK(pool.total_trajectories() == 6);
  std::vector<std::string> got;
  for (int i = 0; i < 3; ++i) {
    CHECK_FALSE(pool.all_released());
    auto group = pool.release();
    REQUIRE(group.size() == 2);
    for (const auto& s : group) {
      CHECK(s.prompt_id == "p" + std::to_string(i));
      CHECK(s.prompt_tokens == group[0].prompt_tokens);  // one prompt for the whole group
      CHECK(s.prompt_tokens.size() == 8);
      CHECK(s.max_new_tokens == 64);
      CHECK(s.generated.empty());
    }
    // Each member samples differently.
    CHECK(group[0].rng_state != group[1].rng_state);
    auto ids = ids_of(group);
    got.insert(got.end(), ids.begin(), ids.end());
  }
  CHECK(got == std::vector<std::string>{"p0/0", "p0/1", "p1/0", "p1/1", "p2/0", "p2/1"});
  // The job's prompts are all out: nothing more, however much room admission leaves.
  CHECK(pool.all_released());
  CHECK(pool.release().empty());
  CHECK(pool.released() == 3);
}

TEST_CASE("manager prompt pool: a trajectory's first state is rebuilt from its id alone") {
  const ManagerConfig cfg = job(0, 2, 4);
  PromptPool pool(cfg, Mode::kStream, Admission::kContinuous, std::nullopt);
  std::vector<SequenceState> released;
  for (int i = 0; i < 3; ++i) {
    auto group = pool.release();
    released.insert(released.end(), group.begin(), group.end());
  }
  // Another pool of the same configuration, told only how far the first one got (a restart).
  PromptPool again(cfg, Mode::kStream, Admission::kContinuous, std::nullopt);
  ManagerSnapshot snap;
  snap.counters.next_prompt = pool.released();
  again.restore(snap);
  for (const auto& s : released) {
    auto rebuilt = again.initial_of(s.trajectory_id);
    REQUIRE(rebuilt.is_ok());
    CHECK(rebuilt->prompt_id == s.prompt_id);
    CHECK(rebuilt->prompt_tokens == s.prompt_tokens);
    CHECK(rebuilt->rng_state == s.rng_state);
    CHECK(rebuilt->max_new_tokens == s.max_new_tokens);
  }
  // Not released, not in a group, not an id at all.
  CHECK_FALSE(again.initial_of("p3/0").is_ok());
  CHECK_FALSE(again.initial_of("p0/2").is_ok());
  CHECK_FALSE(again.initial_of("q0/0").is_ok());
  CHECK_FALSE(again.initial_of("").is_ok());
  // Prompts differ between prompts: the rebuilt ones are not all one constant.
  CHECK(released[0].prompt_tokens != released[2].prompt_tokens);
}

TEST_CASE("manager prompt pool: budget admission stays within the batches ahead of the actor") {
  // Stream mode runs ahead_batches (1) batch of 4 ahead: two groups of 2 until the actor
  // consumes.
  PromptPool pool(job(10, 2, 4), Mode::kStream, Admission::kBudget, std::nullopt);
  CHECK(release_all(pool) == 2);
  CHECK_FALSE(pool.budget_left());
  // Finishing work does not open the budget: only what the actor consumed does.
  for (const char* p : {"p0", "p0", "p1", "p1"})
    pool.count_group_member(p);
  CHECK(release_all(pool) == 0);
  pool.consume(2);
  CHECK(release_all(pool) == 1);
  // An older, lower figure changes nothing.
  pool.consume(1);
  CHECK(pool.consumed() == 2);
  CHECK(release_all(pool) == 0);
  pool.consume(8);
  CHECK(release_all(pool) == 3);
  CHECK(pool.released() == 6);
  // Released and unconsumed never exceed what is allowed ahead.
  CHECK(pool.released() * 2 <= pool.consumed() + 4);
}

TEST_CASE("manager prompt pool: sync mode runs one batch ahead whatever ahead_batches says") {
  ManagerConfig cfg = job(10, 2, 4);
  cfg.ahead_batches = 5;
  PromptPool pool(cfg, Mode::kSync, Admission::kBudget, std::nullopt);
  CHECK(release_all(pool) == 2);
}

TEST_CASE("manager prompt pool: continuous admission pauses only while complete groups wait") {
  // backlog_batches 1 of 4 trajectories: two complete groups of 2 fill the actor's queue.
  PromptPool pool(job(0, 2, 4), Mode::kSluice, Admission::kContinuous, std::nullopt);
  // Nothing complete: work in flight does not hold admission back.
  for (int i = 0; i < 20; ++i)
    REQUIRE_FALSE(pool.release().empty());
  CHECK(pool.budget_left());
  pool.count_group_member("p0");
  pool.count_group_member("p0");
  pool.count_group_member("p1");
  CHECK(pool.ready_backlog() == 2);
  CHECK(pool.budget_left());  // half a group does not count
  pool.count_group_member("p1");
  CHECK(pool.ready_backlog() == 4);
  CHECK_FALSE(pool.budget_left());
  CHECK(pool.release().empty());
  // The actor takes a group: one more may go.
  pool.consume(2);
  CHECK(pool.ready_backlog() == 2);
  CHECK(pool.budget_left());
  CHECK(pool.release().size() == 2);
}

TEST_CASE("manager prompt pool: a group counts as complete once, with its last member") {
  PromptPool pool(job(0, 3, 6), Mode::kSluice, Admission::kContinuous, std::nullopt);
  pool.count_group_member("p0");
  pool.count_group_member("p0");
  pool.count_group_member("p1");
  CHECK(pool.ready_backlog() == 0);
  pool.count_group_member("p0");
  CHECK(pool.ready_backlog() == 3);
  pool.count_group_member("p1");
  CHECK(pool.ready_backlog() == 3);
  pool.count_group_member("p1");
  CHECK(pool.ready_backlog() == 6);
  // What the actor consumed leaves the queue; it never goes below empty.
  pool.consume(9);
  CHECK(pool.ready_backlog() == 0);
}

TEST_CASE("manager prompt pool: a doomed group stays doomed and is recorded once") {
  PromptPool pool(job(0, 2, 4), Mode::kSluice, Admission::kContinuous, std::nullopt);
  ManagerChanges changes;
  CHECK(pool.doom("p1", &changes));
  CHECK_FALSE(pool.doom("p1", &changes));
  CHECK(pool.doom("p4", nullptr));  // no database: recorded nowhere
  CHECK(changes.doomed == std::vector<std::string>{"p1"});
  CHECK(pool.doomed("p1"));
  CHECK(pool.doomed("p4"));
  CHECK_FALSE(pool.doomed("p0"));
  CHECK(pool.doomed_prompts() == std::set<std::string>{"p1", "p4"});
}

TEST_CASE("manager prompt pool: restore takes back the cursor, consumption, groups and dooms") {
  const ManagerConfig cfg = job(10, 2, 4);
  PromptPool pool(cfg, Mode::kStream, Admission::kBudget, std::nullopt);
  ManagerSnapshot snap;
  snap.counters.next_prompt = 3;
  snap.counters.consumed = 2;
  snap.finished = {"p0/0", "p0/1", "p1/0", "p2/1"};
  snap.doomed = {"p2"};
  pool.restore(snap);
  CHECK(pool.released() == 3);
  CHECK(pool.consumed() == 2);
  CHECK(pool.ready_backlog() == 0);  // p0's group complete, and consumed
  pool.count_group_member("p1");     // p1's other member: its group completes now
  CHECK(pool.ready_backlog() == 2);
  CHECK(pool.doomed("p2"));
  // Budget: 3 groups released, 2 consumed, 4 ahead: 6 + 2 > 2 + 4, no more.
  CHECK(pool.release().empty());
  pool.consume(4);
  auto group = pool.release();
  REQUIRE(group.size() == 2);
  CHECK(group[0].trajectory_id == "p3/0");
}

TEST_CASE("manager prompt pool: task prompts, their responses capped at the longest answer") {
  ManagerConfig cfg = job(4, 2, 4);
  cfg.prompt_source = "task";
  cfg.max_new_tokens = 1'000'000;
  auto task = rl::ArithmeticTask::create(cfg.task);
  REQUIRE(task.is_ok());
  const std::uint64_t cap = task->max_response_tokens();
  auto prompt0 = task->train_prompt(0);
  REQUIRE(prompt0.is_ok());
  PromptPool pool(cfg, Mode::kStream, Admission::kContinuous, std::move(task).value());
  auto group = pool.release();
  REQUIRE(group.size() == 2);
  CHECK(group[0].max_new_tokens == cap);
  CHECK(group[0].prompt_tokens ==
        std::vector<std::int32_t>(prompt0->tokens.begin(), prompt0->tokens.end()));
}
