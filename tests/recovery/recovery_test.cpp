// Whole jobs through `sluice run` in which one role is killed with SIGKILL mid-run (the job's
// `chaos` section) and restarted by the launcher's supervisor. Each test asserts what a user of
// a week-long job would check: the job completed, every prompt's trajectories were consumed
// exactly once (none lost, none twice), no reader's version went backwards, and the role really
// died and came back.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "../support/jobs.hpp"
#include "core/event_loop.hpp"
#include "core/process.hpp"

using namespace sluice;
using core::Millis;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kGroup = 4;

// Long enough that a kill lands mid-run, short enough for CI: about ten seconds. (The prompt counts
// below were tripled when continuous admission became sluice mode's default: the same jobs then
// ended in about 2.5 s, and a kill at 2 s could land after the end.)
json job(std::uint64_t prompts) {
  return json{{"name", "recovery"},
              {"mode", "sluice"},
              {"rollouts", 3},
              {"relays", 2},
              {"progress_s", 0},
              {"timeout_s", 240},
              {"restart", {{"backoff_ms", 100}}},
              {"manager",
               {{"prompts", prompts},
                {"group_size", kGroup},
                {"batch_trajectories", 16},
                {"heartbeat_timeout_ms", 1500},
                {"repack_interval_ms", 50}}},
              {"rollout",
               {{"report_ms", 20},
                {"sim",
                 {{"max_sequences", 6},
                  {"t0_ms", 2.0},
                  {"t1_ms", 0.2},
                  {"lengths", {{"median", 16}, {"p99", 160}, {"max_len", 256}}}}}}},
              {"actor",
               {{"weight_bytes", 1024 * 1024},
                {"chunk_bytes", 64 * 1024},
                {"train_ms_per_token", 0.02},
                {"checkpoint_every_steps", 3},
                {"max_staleness", 2}}}};
}

json kill_one(json j, const std::string& role, double at_s) {
  j["chaos"] = json{{"kills", 1}, {"roles", role}, {"first_s", at_s}, {"window_s", 0.5}};
  return j;
}

fs::path work_dir() {
  fs::path dir = fs::temp_directory_path() / ("sluice-recovery-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

using Run = testing::JobRun;

// Waits until no process has `needle` on its command line (the roles of a run name its folder in
// their role files' paths), at most `limit`. True when none is left.
bool wait_until_gone(const std::string& needle, Millis limit) {
  const auto deadline = core::Clock::now() + limit;
  while (core::Clock::now() < deadline) {
    bool any = false;
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string pid = e.path().filename().string();
      if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream f(e.path() / "cmdline", std::ios::binary);
      std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      if (cmd.find(needle) != std::string::npos) {
        any = true;
        break;
      }
    }
    if (!any) return true;
    std::this_thread::sleep_for(Millis(100));
  }
  return false;
}

Run run_job(const std::string& name, const json& j) {
  return testing::run_sluice_job(work_dir(), name, j, Millis(300000));
}

// Every expected trajectory id consumed once: trained (its effect in the final weights) or
// dropped as too stale, never both, never twice.
void check_exactly_once(const Run& r, std::uint64_t prompts) {
  REQUIRE_MESSAGE(r.code == 0, r.output);
  REQUIRE_FALSE(r.summary.is_discarded());
  REQUIRE(r.summary.value("outcome", std::string()) == "ok");
  const json& a = r.summary.at("actor");
  std::multiset<std::string> got;
  for (const auto& id : a.at("accepted_ids"))
    got.insert(id.get<std::string>());
  std::set<std::string> want;
  for (std::uint64_t p = 0; p < prompts; ++p) {
    for (std::uint64_t k = 0; k < kGroup; ++k)
      want.insert("p" + std::to_string(p) + "/" + std::to_string(k));
  }
  CHECK(got.size() == want.size());                              // none twice
  CHECK(std::set<std::string>(got.begin(), got.end()) == want);  // none lost
  CHECK(a.at("trained_samples").get<std::uint64_t>() + a.at("dropped_stale").get<std::uint64_t>() ==
        prompts * kGroup);
  CHECK(r.summary.at("manager").value("done", false));
  CHECK(r.summary.at("watch").value("versions_backwards", 1ull) == 0);
}

// The process `name` was killed and restarted at least once.
void check_restarted(const Run& r, const std::string& role) {
  std::uint64_t kills = 0, restarts = 0;
  for (const auto& [name, v] : r.summary.at("restarts").items()) {
    if (v.value("role", std::string()) != role) continue;
    kills += v.value("kills", 0ull);
    restarts += v.value("restarts", 0ull);
  }
  CHECK_MESSAGE(kills >= 1, role << " was never killed: " << r.output);
  CHECK(restarts >= kills);
}

}  // namespace

TEST_CASE("the rollout manager killed mid-run: restarted from its database, nothing lost") {
  constexpr std::uint64_t kPrompts = 288;
  Run r = run_job("manager", kill_one(job(kPrompts), "rollout-manager", 2.0));
  check_exactly_once(r, kPrompts);
  check_restarted(r, "rollout-manager");
  CHECK(fs::exists(r.dir / "manager.db"));
}

TEST_CASE("the weight store killed mid-run under load: holders re-register, nothing lost") {
  constexpr std::uint64_t kPrompts = 288;
  Run r = run_job("store", kill_one(job(kPrompts), "weightstore", 2.0));
  check_exactly_once(r, kPrompts);
  check_restarted(r, "weightstore");
}

TEST_CASE("a relay killed mid-chain over shared memory: cut out, restarted, nothing lost") {
  constexpr std::uint64_t kPrompts = 288;
  Run r = run_job("relay", kill_one(job(kPrompts), "relay", 2.0));
  check_exactly_once(r, kPrompts);
  check_restarted(r, "relay");
}

TEST_CASE("a relay killed mid-chain over tcp between emulated hosts: nothing lost") {
  if (!testing::can_emulate_hosts()) {
    MESSAGE("skipped: needs root and network namespaces");
    return;
  }
  constexpr std::uint64_t kPrompts = 288;
  json j = kill_one(job(kPrompts), "relay", 2.0);
  j["rollouts"] = 4;
  // Two rollout hosts, a relay on each, behind 200 Mbit/s links; weights cross them over TCP.
  j["hosts"] = {
      {"count", 2}, {"link_rate", "200mbit"}, {"prefix", "srt" + std::to_string(::getpid())}};
  Run r = run_job("relay-tcp", j);
  check_exactly_once(r, kPrompts);
  check_restarted(r, "relay");
}

TEST_CASE("the actor killed between checkpoints resumes from its newest one, nothing twice") {
  // Twice the others' prompts: its kill comes later (3 s), and a job of 96 prompts sometimes
  // ended before it landed (about 4.5 s on an idle machine).
  constexpr std::uint64_t kPrompts = 480;
  Run r = run_job("actor", kill_one(job(kPrompts), "actor", 3.0));
  check_exactly_once(r, kPrompts);
  check_restarted(r, "actor");
  const json& a = r.summary.at("actor");
  CHECK(a.value("restarts", 0ull) >= 1);  // the actor's own count of resumes
  // Its versions went on above what it had published before it died.
  CHECK(r.summary.at("watch").value("versions_backwards", 1ull) == 0);
}

TEST_CASE("the actor killed before its first checkpoint starts above the store's latest") {
  // Found by sluice chaos: an actor restarted without a checkpoint published version 1 again,
  // below what the rollouts ran, and the job stalled.
  constexpr std::uint64_t kPrompts = 96;
  json j = kill_one(job(kPrompts), "actor", 0.5);
  j["actor"]["checkpoint_every_steps"] = 1000;  // no checkpoint before the kill
  j["actor"]["checkpoint_idle_s"] = 0;
  Run r = run_job("actor-early", j);
  check_exactly_once(r, kPrompts);
  check_restarted(r, "actor");
  CHECK(r.summary.at("watch").value("versions_backwards", 1ull) == 0);
  CHECK(r.summary.at("actor").value("resumed_from_step", json()).is_null());  // no checkpoint
}

TEST_CASE("a rollout killed mid-run is restarted and its work finishes elsewhere") {
  constexpr std::uint64_t kPrompts = 288;
  Run r = run_job("rollout", kill_one(job(kPrompts), "rollout", 1.5));
  check_exactly_once(r, kPrompts);
  check_restarted(r, "rollout");
}

TEST_CASE("sluice run --resume continues a job whose launcher was killed") {
  constexpr std::uint64_t kPrompts = 160;
  fs::path file = work_dir() / "resume.json";
  std::ofstream(file) << job(kPrompts).dump(2);
  fs::path out = work_dir() / "resume";
  fs::remove_all(out);
  {
    core::Subprocess::Options o;
    o.argv = {SLUICE_BIN, "run", file.string(), "--out", out.string()};
    o.stderr_to_stdout = true;
    auto p = core::Subprocess::spawn(o).value();
    // Until the actor has checkpointed at least once, then the launcher dies (its children
    // follow it: they are tied to their parent).
    auto deadline = core::Clock::now() + Millis(60000);
    while (core::Clock::now() < deadline && !fs::exists(out / "checkpoints" / "actor.ckpt"))
      std::this_thread::sleep_for(Millis(50));
    REQUIRE(fs::exists(out / "checkpoints" / "actor.ckpt"));
    std::this_thread::sleep_for(Millis(500));
    REQUIRE(p->signal(SIGKILL).is_ok());
    p->wait(Millis(5000)).ignore();
    // Its children notice their parent is gone and exit. The actor first tries to deliver its
    // final acknowledgements to the manager that died with it (a few seconds): a resumed job that
    // ends sooner would have its summary overwritten by the old actor's.
    CHECK(wait_until_gone(out.string() + "/", Millis(20000)));
  }
  REQUIRE_FALSE(fs::exists(out / "summary.json"));
  core::Subprocess::Options o;
  o.argv = {SLUICE_BIN, "run", "--resume", out.string()};
  o.stderr_to_stdout = true;
  auto p = core::Subprocess::spawn(o).value();
  std::string output = p->read_all(Millis(300000));
  auto code = p->wait(Millis(5000));
  Run r = testing::read_job_run(out, code.is_ok() ? *code : -1, std::move(output));
  check_exactly_once(r, kPrompts);
  CHECK(r.summary.at("actor").value("restarts", 0ull) >= 1);
}

TEST_CASE("sluice run --resume refuses a folder that is not a run folder") {
  fs::path empty = work_dir() / "not-a-run";
  fs::create_directories(empty);
  core::Subprocess::Options o;
  o.argv = {SLUICE_BIN, "run", "--resume", empty.string()};
  o.stderr_to_stdout = true;
  auto p = core::Subprocess::spawn(o).value();
  std::string output = p->read_all(Millis(30000));
  auto code = p->wait(Millis(5000));
  REQUIRE(code.is_ok());
  CHECK(*code == 2);
  CHECK(output.find("no job.json") != std::string::npos);
}
