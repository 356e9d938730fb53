// The finite job's limit (sim/limit.hpp), on jobs small enough to work out by hand: which term
// binds (the first batch then every step, or the whole generation then the last step), the
// longest sequence at a batch of one against the fleet's full-batch throughput, a mixed fleet,
// a last partial batch; and on a simulated job, no mode beats it.
#include <doctest/doctest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "core/log.hpp"
#include "sim/limit.hpp"
#include "sim/simulator.hpp"

using namespace sluice;
using sim::LimitJob;
using sim::LimitRollout;
using sim::LimitTrajectory;

namespace {

// Four groups of two; every trajectory prefills 10 tokens. Decode tokens by group:
// {10, 20}, {30, 40}, {50, 60}, {100, 5}. Two groups a step: two steps.
LimitJob four_groups() {
  LimitJob job;
  const std::uint64_t lengths[4][2] = {{10, 20}, {30, 40}, {50, 60}, {100, 5}};
  for (const auto& g : lengths) {
    job.groups.push_back({LimitTrajectory{g[0], 10, g[0], 0}, LimitTrajectory{g[1], 10, g[1], 0}});
  }
  job.batch_groups = 2;
  // rho = 10 / (0.1 + 0.01 x 10) = 50 tokens/s; a step of one 0.11 s; a prefill token costs
  // rho x 0.001 = 0.05 decode tokens.
  job.rollouts = {LimitRollout{0.1, 0.01, 0.001, 10}};
  job.train_fixed_s = 1;
  job.train_s_per_token = 0.01;
  job.publish_s = 0.5;
  job.first_weights_s = 2;
  return job;
}

}  // namespace

TEST_CASE("limit: the longest group then the last step, when training is quick") {
  // Groups alone: max length x 0.11 + 10 x 0.001 = 2.21, 4.41, 6.61, 11.01 s.
  // Costs: decode + 0.05 x 20 prefill = 31, 71, 111, 106 tokens; trained 30, 70, 110, 105 (315).
  // k = 1: G = max(4.41, (31 + 71) / 50) = 4.41; T = 2 x 1 + 0.01 x 315 + 0.5 = 5.65: 12.06.
  // k = 2: G = max(11.01, 319 / 50) = 11.01; T = 1 + 0.01 x (315 - 110 - 105) = 2: 15.01.
  auto lim = sim::job_limit(four_groups());
  REQUIRE_MESSAGE(lim.is_ok(), lim.status().to_string());
  CHECK(lim->steps == 2);
  CHECK(lim->trained_tokens == 315);
  CHECK(lim->decode_tokens == 315);
  CHECK(lim->binding_step == 2);
  CHECK(lim->generate_s == doctest::Approx(11.01));
  CHECK(lim->train_s == doctest::Approx(2.0));
  CHECK(lim->wall_s == doctest::Approx(15.01));
  CHECK(lim->generate_all_s == doctest::Approx(319.0 / 50));
  CHECK(lim->train_all_s == doctest::Approx(5.65));
  CHECK(lim->longest_s == doctest::Approx(11.01));
  CHECK(lim->fleet_tokens_per_s == doctest::Approx(50));
}

TEST_CASE("limit: the first batch then every step, when training is slow") {
  LimitJob job = four_groups();
  job.train_s_per_token = 0.1;
  // k = 1: 2 + 4.41 + (2 + 31.5 + 0.5) = 40.41; k = 2: 2 + 11.01 + (1 + 10) = 24.01.
  auto lim = sim::job_limit(job);
  REQUIRE(lim.is_ok());
  CHECK(lim->binding_step == 1);
  CHECK(lim->generate_s == doctest::Approx(4.41));
  CHECK(lim->train_s == doctest::Approx(34.0));
  CHECK(lim->wall_s == doctest::Approx(40.41));
  // Without the first batch the bound would be training alone (36 s with the first weights).
  CHECK(lim->wall_s > job.first_weights_s + lim->train_all_s);
}

TEST_CASE("limit: the fleet's throughput, when it decodes one sequence at a time") {
  LimitJob job = four_groups();
  // rho = 1 token/s; prefill free. k = 2: G = max(100, 315) = 315; T = 2: 319.
  job.rollouts = {LimitRollout{1.0, 0.0, 0.0, 1}};
  auto lim = sim::job_limit(job);
  REQUIRE(lim.is_ok());
  CHECK(lim->binding_step == 2);
  CHECK(lim->generate_s == doctest::Approx(315));
  CHECK(lim->wall_s == doctest::Approx(319));
}

TEST_CASE("limit: a mixed fleet takes the fastest single step and the summed throughput") {
  LimitJob job = four_groups();
  // A second rollout: a step of one 0.07 s, rho = 10 / 0.25 = 40, rho x prefill = 0.08 (the
  // first's 0.05 is the cheaper). k = 2: G = max(100 x 0.07 + 0.01, 319 / 90) = 7.01; T = 2.
  // k = 1: G = max(40 x 0.07 + 0.01, 102 / 90) = 2.81; T = 5.65: 10.46.
  job.rollouts.push_back(LimitRollout{0.05, 0.02, 0.002, 10});
  auto lim = sim::job_limit(job);
  REQUIRE(lim.is_ok());
  CHECK(lim->fleet_tokens_per_s == doctest::Approx(90));
  CHECK(lim->binding_step == 2);
  CHECK(lim->wall_s == doctest::Approx(11.01));
  CHECK(lim->generate_all_s == doctest::Approx(319.0 / 90));
}

TEST_CASE("limit: a last partial step trains at least the smallest groups left") {
  LimitJob job = four_groups();
  job.groups.pop_back();  // {100, 5} gone: three groups, steps of 2 and 1; trained 210
  job.train_s_per_token = 0.1;
  // k = 1: G = 4.41 (second quickest); T = 2 + 21 + 0.5 = 23.5: 29.91.
  // k = 2: G = max(6.61, 213 / 50) = 6.61; T = 1 + 0.1 x (210 - 110 - 70) = 4: 12.61.
  auto lim = sim::job_limit(job);
  REQUIRE(lim.is_ok());
  CHECK(lim->steps == 2);
  CHECK(lim->trained_tokens == 210);
  CHECK(lim->binding_step == 1);
  CHECK(lim->wall_s == doctest::Approx(29.91));
}

TEST_CASE("limit: waits on the environment count once per trajectory, alone") {
  LimitJob job = four_groups();
  job.groups[0][0].wait_s = 20;  // the quickest group now takes 10 x 0.11 + 0.01 + 20 = 21.11
  // k = 2: G = max(21.11, 6.38) = 21.11; T = 2: 25.11.
  auto lim = sim::job_limit(job);
  REQUIRE(lim.is_ok());
  CHECK(lim->longest_s == doctest::Approx(21.11));
  CHECK(lim->wall_s == doctest::Approx(25.11));
}

TEST_CASE("limit: a job it cannot bound is refused") {
  LimitJob job = four_groups();
  job.batch_groups = 0;
  CHECK_FALSE(sim::job_limit(job).is_ok());
  job = four_groups();
  job.groups.push_back({});
  CHECK_FALSE(sim::job_limit(job).is_ok());
  job = four_groups();
  job.rollouts.clear();
  CHECK_FALSE(sim::job_limit(job).is_ok());
  job = four_groups();
  job.publish_s = -1;
  CHECK_FALSE(sim::job_limit(job).is_ok());
}

namespace {

const bool kQuiet = [] {
  core::log::set_level(core::log::Level::kWarn);
  return true;
}();

// tests/sim/simulate_test.cpp's small job: 8 rollouts x 8 sequences, 96 prompts x 4, steps of 64.
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
  in.manager.prompt_tokens = 32;
  in.actor.batch_trajectories = 64;
  in.actor.group_size = 4;
  in.actor.max_staleness = 1000;
  in.actor.train_ms_fixed = 50;
  in.actor.train_ms_per_token = 0.02;
  in.actor.weight_bytes = 8u << 20;
  in.actor.chunk_bytes = 2u << 20;
  in.sim.progress_s = 0;
  return in;
}

}  // namespace

TEST_CASE("limit row: the job's own lengths, worked out by hand") {
  sim::SimInput in = small_job();
  const auto file = std::filesystem::temp_directory_path() /
                    ("sluice_limit_lengths_" + std::to_string(::getpid()) + ".txt");
  std::ofstream(file) << "100\n";
  in.engine.lengths.kind = "file";
  in.engine.lengths.file = file.string();
  // A version broadcast in 1 us (8 MiB at 8388.608 GB/s): the first weights and the publish.
  in.sim.broadcast_gbps = 8388.608;
  auto r = sim::simulate_mode(in, "limit");
  std::filesystem::remove(file);
  REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
  // rho = 8 / 6 ms = 1333.3 tokens/s a rollout, 10666.7 the fleet; a prefill token costs 1/75 of
  // a decode token. A group: 400 decode tokens + 128 / 75 = 401.71. The last step binds:
  // 96 groups / 10666.7 = 3.6154 s, then 50 ms + 0.02 ms x 6400 = 0.178 s, after 1 us.
  const double gen = 96 * (400 + 128.0 / 75) / (64 / 0.006);
  CHECK(r->wall_s == doctest::Approx(1e-6 + gen + 0.178).epsilon(1e-9));
  CHECK(r->trained_tokens == 384 * 100);
  CHECK(r->steps == 6);
  CHECK(r->tokens_per_s == doctest::Approx(38400 / (1e-6 + gen + 0.178)));
}

TEST_CASE("limit row: no simulated mode finishes the job sooner") {
  const sim::SimInput in = small_job();
  auto lim = sim::simulate_mode(in, "limit");
  auto steady = sim::simulate_mode(in, "steady-limit");
  REQUIRE_MESSAGE(lim.is_ok(), lim.status().to_string());
  REQUIRE(steady.is_ok());
  // A finite job's start and end cost something: its limit is below the throughput limit.
  CHECK(lim->tokens_per_s < steady->tokens_per_s);
  for (const char* mode : {"sync", "one-step-off", "stream", "partial-rollout", "sluice",
                           "sluice-norepack", "partial-broadcast"}) {
    CAPTURE(mode);
    auto r = sim::simulate_mode(in, mode);
    REQUIRE(r.is_ok());
    CHECK(r->trained_tokens == lim->trained_tokens);
    CHECK(r->wall_s > lim->wall_s);
  }
}
