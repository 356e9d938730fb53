// The manager's state at the length of a long job: 1,000,000 trajectories through ManagerState
// and its database, the actor acknowledging as it goes. What a user running a job for weeks
// relies on: memory does not grow with the job (what was acknowledged is erased), and a restart
// costs what is in flight, not the job's history.
//
// SLUICE_SCALE_TRAJECTORIES sets the job's size (default 1,000,000).
#include <doctest/doctest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "rollout/manager_db.hpp"
#include "rollout/manager_state.hpp"

using namespace sluice;
using rollout::Clock;

namespace {

std::uint64_t job_trajectories() {
  const char* v = std::getenv("SLUICE_SCALE_TRAJECTORIES");
  return v ? std::strtoull(v, nullptr, 10) : 1'000'000;
}

// Resident memory of this process, in bytes (/proc/self/statm).
std::uint64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  std::uint64_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

TEST_CASE("manager scale: a million trajectories, memory flat after consumption, quick restore") {
  const std::uint64_t total = job_trajectories();
  const std::uint32_t group = 4;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("sluice-manager-scale-{}", ::getpid());
  std::filesystem::create_directories(dir);
  rollout::ManagerConfig cfg;
  cfg.mode = "sluice";
  cfg.prompts = total / group;
  cfg.group_size = group;
  cfg.batch_trajectories = 256;
  cfg.prompt_tokens = 1;
  cfg.max_new_tokens = 1;
  cfg.prefetch = 0;
  cfg.repack = false;
  cfg.heartbeat_timeout_ms = 1'000'000;
  cfg.state_path = (dir / "manager.db").string();
  REQUIRE(cfg.validate().is_ok());
  Clock::time_point now = Clock::time_point{} + std::chrono::hours(1);
  auto db = rollout::ManagerDb::open(cfg.state_path);
  REQUIRE(db.is_ok());
  auto made = rollout::ManagerState::create(cfg, std::move(db).value(), now);
  REQUIRE(made.is_ok());
  std::unique_ptr<rollout::ManagerState> m = std::move(made).value();
  m->published({1, 0});

  // One rollout of 1024 slots finishes everything it holds at each report; the actor takes and
  // acknowledges what it is sent. Memory is sampled once a fifth of the job is done (every table
  // at its working size) and at the end.
  rollout::CollectRequest c;
  c.epoch = "actor";
  std::vector<rollout::SequenceState> running;
  std::uint64_t rss_fifth = 0;
  std::size_t most_tracked = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (!m->done()) {
    now += std::chrono::milliseconds(1);
    rollout::ReportRequest q;
    q.id = "rollout-0";
    q.incarnation = "1";
    q.version = 1;
    q.staged = 1;
    q.capacity = {1024, 1u << 20};
    for (auto& s : running) {
      s.generated = {3};
      s.logprobs = {-0.5f};
      s.versions = {1};
      q.finished.push_back(rollout::to_trajectory(s, 1.0, "rollout-0"));
    }
    REQUIRE(m->check_report(q).is_ok());
    rollout::ReportReply r = m->report(std::move(q), now);
    REQUIRE(m->commit().is_ok());
    running = std::move(r.assign);
    auto got = m->collect(c, now).trajectories;
    c.ack.clear();
    for (const auto& t : got)
      c.ack.push_back(t.id);
    c.consumed += got.size();
    c.max = 4096;
    REQUIRE(m->commit().is_ok());
    most_tracked = std::max(most_tracked, m->tracked());
    if (rss_fifth == 0 && m->counts().acked >= total / 5) rss_fifth = rss_bytes();
    REQUIRE(m->counts().acked <= total);
    // Nothing running, nothing sent, nothing to acknowledge, and not done: a stall.
    REQUIRE_FALSE((running.empty() && got.empty() && c.ack.empty() && !m->done()));
  }
  const double run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::uint64_t rss_end = rss_bytes();
  CHECK(m->counts().finished == total);
  CHECK(m->counts().acked == total);
  CHECK(m->counts().duplicates == 0);
  // Flat: at most what is in flight and held for the actor, whatever the job's length.
  CHECK(most_tracked <= 1024 + 4096 + 2 * cfg.backlog_batches * cfg.batch_trajectories);
  CHECK(m->tracked() == 0);
  CHECK(m->done_record().floor() == total / group);
  CHECK(m->done_record().above() == 0);
  MESSAGE(
      fmt::format("{} trajectories in {:.1f} s; resident memory {:.1f} MiB at a fifth, {:.1f} "
                  "MiB at the end; most trajectories tracked at once {}",
                  total, run_s, static_cast<double>(rss_fifth) / (1 << 20),
                  static_cast<double>(rss_end) / (1 << 20), most_tracked));
  CHECK(rss_end <= rss_fifth + (32u << 20));

  // A restart reads what is in flight, not the history: the database holds counters and a floor.
  m.reset();
  const auto r0 = std::chrono::steady_clock::now();
  auto db2 = rollout::ManagerDb::open(cfg.state_path);
  REQUIRE(db2.is_ok());
  auto snap_db = rollout::ManagerDb::open(cfg.state_path);
  REQUIRE(snap_db.is_ok());
  auto snap = snap_db.value()->load();
  REQUIRE(snap.is_ok());
  CHECK(snap->finished.empty());
  CHECK(snap->unacked.empty());
  CHECK(snap->done.empty());
  CHECK(snap->counters.done_floor == total / group);
  auto again = rollout::ManagerState::create(cfg, std::move(db2).value(), now);
  REQUIRE(again.is_ok());
  const double restore_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count();
  MESSAGE(fmt::format("restore after {} trajectories: {:.3f} s", total, restore_s));
  CHECK(restore_s < 1.0);
  CHECK(again.value()->done());
  CHECK(again.value()->counts().finished == total);
  CHECK(again.value()->where("p0/0")->state == rollout::TrajState::kFinished);
  again.value().reset();
  std::filesystem::remove_all(dir);
}
