// sluice simulate: what a user of the simulator checks. Every trajectory trained once, versions
// never going back, the same seed giving the same result, sync slower than sluice on a long
// tail, unknown keys refused, and 1024 GPUs simulated to the end. No timing is asserted.
#include <doctest/doctest.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/config.hpp"
#include "core/log.hpp"
#include "sim/simulator.hpp"

using namespace sluice;

namespace {

// The manager logs every join and publish at info.
const bool kQuiet = [] {
  core::log::set_level(core::log::Level::kWarn);
  return true;
}();

// The e2e bench's default workload, smaller: a long tail with p99/median = 10.
sim::SimInput small_job() {
  sim::SimInput in;
  in.rollouts = 8;
  in.report_ms = 25;
  in.engine.max_sequences = 8;
  in.engine.t0_ms = 4.0;
  in.engine.t1_ms = 0.25;
  in.engine.prefill_ms_per_token = 0.01;
  in.engine.lengths.kind = "lognormal";
  in.engine.lengths.median = 64;
  in.engine.lengths.p99 = 640;
  in.engine.lengths.max_len = 1024;
  in.engine.seed = 1;
  in.manager.prompts = 96;
  in.manager.group_size = 4;
  in.manager.batch_trajectories = 64;
  in.manager.max_new_tokens = 1024;
  in.actor.batch_trajectories = 64;
  in.actor.group_size = 4;
  in.actor.max_staleness = 1000;  // nothing dropped: every trajectory must be trained
  in.actor.train_ms_fixed = 50;
  in.actor.train_ms_per_token = 0.02;
  in.actor.weight_bytes = 8u << 20;
  in.actor.chunk_bytes = 2u << 20;
  in.sim.progress_s = 0;
  return in;
}

const char* const kModes[] = {"sync",   "one-step-off",    "stream",           "partial-rollout",
                              "sluice", "sluice-norepack", "partial-broadcast"};

}  // namespace

TEST_CASE("every trajectory is trained exactly once and versions only go up, in every mode") {
  const sim::SimInput in = small_job();
  for (const char* mode : kModes) {
    CAPTURE(mode);
    auto r = sim::simulate_mode(in, mode);
    REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
    CHECK(r->total_trajectories == 96 * 4);
    CHECK(r->trained_trajectories == r->total_trajectories);
    CHECK(r->trained_twice == 0);
    CHECK(r->dropped == 0);
    CHECK(r->version_regressions == 0);
    CHECK(r->steps == 6);  // 384 trajectories in batches of 64
    CHECK(r->tokens_per_s > 0);
    const double parts = r->gpu.generating + r->gpu.loading + r->gpu.barrier + r->gpu.idle;
    CHECK(parts == doctest::Approx(r->gpus * r->wall_s).epsilon(0.01));
  }
}

TEST_CASE("sync mode trains fewer tokens per second than sluice on a long tail") {
  sim::SimInput in = small_job();
  in.engine.lengths.p99 = 1280;  // p99 / median = 20
  auto sync = sim::simulate_mode(in, "sync");
  auto sl = sim::simulate_mode(in, "sluice");
  REQUIRE(sync.is_ok());
  REQUIRE(sl.is_ok());
  CHECK(sync->tokens_per_s < sl->tokens_per_s);
}

TEST_CASE("the same seed gives the same result: another seed another") {
  const sim::SimInput in = small_job();
  auto a = sim::simulate_mode(in, "sluice");
  auto b = sim::simulate_mode(in, "sluice");
  REQUIRE(a.is_ok());
  REQUIRE(b.is_ok());
  CHECK(a->wall_s == b->wall_s);
  CHECK(a->tokens_per_s == b->tokens_per_s);
  CHECK(a->events == b->events);
  CHECK(a->repacks == b->repacks);
  sim::SimInput other = in;
  other.engine.seed = 2;
  auto c = sim::simulate_mode(other, "sluice");
  REQUIRE(c.is_ok());
  CHECK(c->trained_tokens != a->trained_tokens);
}

TEST_CASE("an unknown key in the simulate section is refused, naming it") {
  auto doc = core::config::parse_json_text(R"({"gpus_per_host": 8, "gpus_per_rolout": 2})", "t");
  REQUIRE(doc.is_ok());
  sim::SimulateConfig c;
  core::Status st = core::config::parse(*doc, c);
  REQUIRE_FALSE(st.is_ok());
  CHECK(st.message().find("unknown key 'gpus_per_rolout'") != std::string::npos);
  auto bad = core::config::parse_json_text(R"({"broadcast": "ring"})", "t");
  REQUIRE(bad.is_ok());
  CHECK_FALSE(core::config::parse(*bad, c).is_ok());
}

TEST_CASE("partial-broadcast: each version stops the trainer and every rollout for its broadcast") {
  sim::SimInput in = small_job();
  // 8 MiB at 0.008388608 GB/s: one second a version.
  in.sim.broadcast_gbps = 0.008388608;
  const double broadcast_s = 1.0;
  auto b = sim::simulate_mode(in, "partial-broadcast");
  auto p = sim::simulate_mode(in, "partial-rollout");
  REQUIRE_MESSAGE(b.is_ok(), b.status().to_string());
  REQUIRE(p.is_ok());
  // The trainer sends every version itself (the first included) and waits for it.
  CHECK(b->versions >= 6);
  CHECK(b->wall_s >= static_cast<double>(b->versions) * broadcast_s);
  // Every rollout stops for the first broadcast and for at least one during the job.
  CHECK(b->gpu.loading >= 2 * broadcast_s * b->gpus);
  CHECK(b->gpu.loading > 10 * p->gpu.loading);
  CHECK(b->tokens_per_s < p->tokens_per_s);
  in.sim.broadcast_gbps = 0;
  CHECK_FALSE(sim::simulate_mode(in, "partial-broadcast").is_ok());
}

TEST_CASE(
    "steady-limit: the slower of the fleet at full batch and the trainer, and no mode beats it") {
  sim::SimInput in = small_job();
  const auto file = std::filesystem::temp_directory_path() /
                    ("sluice_steady_lengths_" + std::to_string(::getpid()) + ".txt");
  std::ofstream(file) << "100\n";
  in.engine.lengths.kind = "file";
  in.engine.lengths.file = file.string();
  // The fleet: 8 rollouts x 8 sequences / (4 ms + 0.25 ms x 8) = 10,666.7 tokens/s. The trainer:
  // 64 x 100 tokens in 50 ms + 0.02 ms x 6,400 = 178 ms, 35,955 tokens/s.
  auto fleet_bound = sim::simulate_mode(in, "steady-limit");
  REQUIRE_MESSAGE(fleet_bound.is_ok(), fleet_bound.status().to_string());
  CHECK(fleet_bound->tokens_per_s == doctest::Approx(64.0 / 0.006));
  CHECK(fleet_bound->rollout_util == doctest::Approx(1.0));
  CHECK(fleet_bound->trained_tokens == 96 * 4 * 100);
  // A mixed fleet: the first 4 rollouts step in 2 ms + 0.25 ms x 8 (2,000 tokens/s each), the
  // other 4 as the engine (1,333.3 each).
  sim::SimInput mixed = in;
  mixed.sim.gpu_types = {sim::GpuType{"fast", 4, 2.0, 0.25, 0.01}};
  auto mixed_bound = sim::simulate_mode(mixed, "steady-limit");
  REQUIRE(mixed_bound.is_ok());
  CHECK(mixed_bound->tokens_per_s == doctest::Approx(4 * 8 / 0.004 + 4 * 8 / 0.006));
  // A slower trainer: 50 ms + 0.2 ms x 6,400 = 1,330 ms a step, 4,812 tokens/s.
  in.actor.train_ms_per_token = 0.2;
  auto trainer_bound = sim::simulate_mode(in, "steady-limit");
  REQUIRE(trainer_bound.is_ok());
  CHECK(trainer_bound->tokens_per_s == doctest::Approx(6400.0 / 1.33));
  CHECK(trainer_bound->rollout_util == doctest::Approx(6400.0 / 1.33 / (64.0 / 0.006)));
  CHECK(trainer_bound->actor_idle_frac == doctest::Approx(0.0));
  std::filesystem::remove(file);

  // On the long tail, every simulated mode stays under its job's throughput limit.
  const sim::SimInput tail = small_job();
  auto ideal = sim::simulate_mode(tail, "steady-limit");
  REQUIRE(ideal.is_ok());
  for (const char* mode : kModes) {
    CAPTURE(mode);
    auto r = sim::simulate_mode(tail, mode);
    REQUIRE(r.is_ok());
    CHECK(r->tokens_per_s < ideal->tokens_per_s);
  }
}

TEST_CASE("a bad label or an endless job is an error, not a hang") {
  sim::SimInput in = small_job();
  CHECK_FALSE(sim::simulate_mode(in, "lockstep").is_ok());
  in.manager.prompts = 0;
  CHECK_FALSE(sim::simulate_mode(in, "sluice").is_ok());
}

TEST_CASE("1024 GPUs: 128 rollouts of 8 GPUs run a job to its end") {
  sim::SimInput in = small_job();
  in.rollouts = 128;
  in.sim.gpus_per_rollout = 8;
  in.engine.max_sequences = 32;
  in.manager.prompts = 1024;  // 4096 trajectories
  in.manager.batch_trajectories = 1024;
  in.actor.batch_trajectories = 1024;
  in.actor.weight_bytes = 64ull << 30;
  in.actor.chunk_bytes = 64u << 20;
  for (const char* mode : {"sync", "sluice"}) {
    CAPTURE(mode);
    auto r = sim::simulate_mode(in, mode);
    REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
    CHECK(r->gpus == 1024);
    CHECK(r->trained_trajectories == 4096);
    CHECK(r->trained_twice == 0);
  }
}

TEST_CASE("the CPU model: two rollouts needing a whole core each take twice as long on one core") {
  sim::SimInput in = small_job();
  in.rollouts = 2;
  in.engine.t1_ms = 0;  // every decode step 4 ms, whatever the batch
  in.engine.prefill_ms_per_token = 0;
  in.engine.lengths.median = 200;  // every sequence 200 tokens
  in.engine.lengths.p99 = 200;
  in.manager.prompts = 16;
  in.manager.batch_trajectories = 16;
  in.actor.batch_trajectories = 16;
  in.actor.train_ms_fixed = 0;
  in.actor.train_ms_per_token = 0;
  in.sim.cpu.step_cpu_ms = 4.0;  // a decode step keeps a core busy all through
  auto off = sim::simulate_mode(in, "stream");
  in.sim.cpu.cores = 2;
  auto two = sim::simulate_mode(in, "stream");
  in.sim.cpu.cores = 1;
  auto one = sim::simulate_mode(in, "stream");
  REQUIRE(off.is_ok());
  REQUIRE(two.is_ok());
  REQUIRE(one.is_ok());
  // Two cores are enough: the same job as without the model.
  CHECK(two->wall_s == doctest::Approx(off->wall_s).epsilon(0.01));
  // One core for two: every step takes twice as long (the weight updates do not, hence 10%).
  CHECK(one->wall_s / two->wall_s == doctest::Approx(2.0).epsilon(0.1));
  CHECK(one->trained_trajectories == two->trained_trajectories);
  CHECK(one->tokens_per_s < 0.6 * two->tokens_per_s);
}

TEST_CASE("the CPU model refuses a bad cores value or cost") {
  sim::SimInput in = small_job();
  in.sim.cpu.cores = -1;
  CHECK_FALSE(sim::simulate_mode(in, "sluice").is_ok());
  in.sim.cpu.cores = std::nan("");
  CHECK_FALSE(sim::simulate_mode(in, "sluice").is_ok());
  in.sim.cpu.cores = 2;
  in.sim.cpu.cpu_s_per_gb = -0.5;
  CHECK_FALSE(sim::simulate_mode(in, "sluice").is_ok());
  sim::SimulateConfig c;
  auto bad = core::config::parse_json_text(R"({"cpu": {"cores": -2}})", "t");
  REQUIRE(bad.is_ok());
  auto st = core::config::parse(*bad, c);
  if (st.is_ok()) st = c.validate();
  CHECK_FALSE(st.is_ok());
  CHECK(st.message().find("cpu") != std::string::npos);
}

TEST_CASE("episodes: waits on the environment are simulated, and sluice trains faster than sync") {
  sim::SimInput in = small_job();
  in.engine.turns = 4;
  in.engine.env_tokens = 16;
  in.env_latency.median_ms = 100;
  in.env_latency.p99_ms = 3000;
  in.env_latency.max_ms = 10000;
  double env_share[2] = {0, 0};
  double rate[2] = {0, 0};
  const char* modes[] = {"sync", "sluice"};
  for (int i = 0; i < 2; ++i) {
    CAPTURE(modes[i]);
    auto r = sim::simulate_mode(in, modes[i]);
    REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
    CHECK(r->trained_trajectories == 96 * 4);
    CHECK(r->trained_twice == 0);
    CHECK(r->version_regressions == 0);
    for (const auto& [cause, share] : r->free_slots)
      if (cause == "environment") env_share[i] = share;
    rate[i] = r->tokens_per_s;
  }
  // Sync's slots wait on the environment at every batch's end; sluice gives them other work and
  // trains faster. Both count the waits.
  CHECK(env_share[0] > 0.05);
  CHECK(env_share[1] > 0);
  CHECK(rate[1] > rate[0]);
  // Without the waits the same job is faster: the latency is really simulated.
  sim::SimInput quick = in;
  quick.engine.turns = 1;
  auto plain = sim::simulate_mode(quick, "sync");
  REQUIRE(plain.is_ok());
  CHECK(plain->wall_s < 0.5 * sim::simulate_mode(in, "sync")->wall_s);
}
