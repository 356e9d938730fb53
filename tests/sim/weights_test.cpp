// The weight-movement model (sim/weights.hpp) on the 1T-parameter update: what a
// reader of `sluice simulate --update-only` checks. Faster links shorten the relay stage in
// proportion, a host-share relay holds 1/hosts-per-rollout of the version, a GPU reads no chunk
// its relay does not hold, and no arrangement ends below the line-rate floor.
#include <doctest/doctest.h>

#include <cmath>

#include "sim/weights.hpp"

using namespace sluice;

namespace {

constexpr std::uint64_t kBytes = 2'000'000'000'000;  // 1T parameters in bf16
constexpr std::uint64_t kChunk = 64u << 20;
constexpr std::uint32_t kRollouts = 4;

// examples/scale/1t_update.json: 256 trainer GPUs, 4 rollouts of 32 GPUs on hosts of 8.
sim::SimulateConfig one_t(const char* relay_holds) {
  sim::SimulateConfig c;
  c.gpus_per_rollout = 32;
  c.gpus_per_host = 8;
  c.trainer_gpus = 256;
  c.relay_holds = relay_holds;
  c.stage_gbps = 6400;
  c.trainer_gbps = 400;
  c.link_gbps = 400;
  c.hop_latency_ms = 0.01;
  c.h2d_gbps = 25;
  return c;
}

// The relay stage: from the staged version to the last relay holding its part.
double relay_stage(const sim::UpdateTimes& u) {
  return u.last_relay_s - u.stage_s;
}

}  // namespace

TEST_CASE("doubling the link rate halves the relay stage, whatever the relays hold") {
  for (const char* holds : {"whole", "host-share"}) {
    CAPTURE(holds);
    sim::SimulateConfig c = one_t(holds);
    c.hop_latency_ms = 0;  // latency does not scale with the rate
    const sim::UpdateTimes slow = sim::update_times(c, kRollouts, kBytes, kChunk);
    c.link_gbps *= 2;
    c.trainer_gbps *= 2;
    const sim::UpdateTimes fast = sim::update_times(c, kRollouts, kBytes, kChunk);
    CHECK(relay_stage(slow) > 1.0);
    CHECK(relay_stage(fast) == doctest::Approx(relay_stage(slow) / 2));
  }
}

TEST_CASE("a master relay is bounded by its own NIC, not by one trainer host's") {
  sim::SimulateConfig c = one_t("whole");
  const sim::UpdateTimes many = sim::update_times(c, kRollouts, kBytes, kChunk);
  // 2 TB at the relay's 400 GB/s.
  CHECK(many.first_relay_s - many.stage_s == doctest::Approx(5.0).epsilon(1e-3));
  // One trainer host at a tenth of the relay's rate: the trainer's side bounds it.
  c.trainer_gpus = 8;
  c.trainer_gbps = 40;
  const sim::UpdateTimes one = sim::update_times(c, kRollouts, kBytes, kChunk);
  CHECK(one.first_relay_s - one.stage_s == doctest::Approx(50.0).epsilon(1e-3));
}

TEST_CASE("with host-share each relay holds 1/hosts-per-rollout of the version") {
  const sim::SimulateConfig whole = one_t("whole"), share = one_t("host-share");
  CHECK(sim::hosts_per_rollout(share) == 4);
  const std::vector<sim::RelayTimes> w = sim::relay_times(whole, 16, kBytes, kChunk);
  const std::vector<sim::RelayTimes> s = sim::relay_times(share, 16, kBytes, kChunk);
  REQUIRE(w.size() == 16);
  REQUIRE(s.size() == 16);
  for (std::size_t h = 0; h < 16; ++h) {
    CHECK(w[h].bytes == doctest::Approx(static_cast<double>(kBytes)));
    CHECK(s[h].bytes == doctest::Approx(static_cast<double>(kBytes) / 4));
  }
}

TEST_CASE("the update never ends below the line-rate floor, nor a GPU load below its h2d time") {
  for (const char* holds : {"whole", "host-share"}) {
    for (double link : {50.0, 400.0, 3200.0}) {
      for (double h2d : {5.0, 25.0, 400.0}) {
        CAPTURE(holds);
        CAPTURE(link);
        CAPTURE(h2d);
        sim::SimulateConfig c = one_t(holds);
        c.link_gbps = c.trainer_gbps = link;
        c.h2d_gbps = h2d;
        const sim::UpdateTimes u = sim::update_times(c, kRollouts, kBytes, kChunk);
        CHECK(u.switch_end_s >= u.floor_s);
        CHECK(u.switch_end_s >= u.last_relay_s);
        CHECK(u.stall_s == doctest::Approx(sim::switch_s(c, kBytes)));
        CHECK(u.switch_start_s >= u.stage_s);
      }
    }
  }
}

TEST_CASE("a GPU reads only chunks its relay holds: its load ends after the relay's last chunk") {
  const sim::SimulateConfig c = one_t("whole");
  sim::RelayTimes r;
  r.first_s = 0.2;
  r.all_s = 5.0;
  r.bytes = static_cast<double>(kBytes);
  // Asked for at once: the 2.5 s load ends with the relay's last chunk (plus its 2 MiB part).
  sim::LoadWindow w = sim::load_window(c, r, kBytes, kChunk, 0.0);
  CHECK(w.end_s > r.all_s);
  CHECK(w.end_s == doctest::Approx(r.all_s).epsilon(1e-3));
  CHECK(w.end_s - w.start_s == doctest::Approx(2.5));
  // Asked for after the relay holds it all: the whole load from the ask.
  w = sim::load_window(c, r, kBytes, kChunk, 10.0);
  CHECK(w.start_s == doctest::Approx(10.0));
  CHECK(w.end_s == doctest::Approx(12.5));
  // A GPU slower than its share arrives: bounded by its own rate from the first chunk.
  sim::SimulateConfig slow = c;
  slow.h2d_gbps = 5;
  w = sim::load_window(slow, r, kBytes, kChunk, 0.0);
  CHECK(w.start_s == doctest::Approx(r.first_s));
  CHECK(w.end_s == doctest::Approx(r.first_s + 12.5));
}

TEST_CASE(
    "digests: relays start once every chunk is digested and signed, and verify no faster "
    "than their cores") {
  sim::SimulateConfig c = one_t("host-share");
  const sim::UpdateTimes free = sim::update_times(c, kRollouts, kBytes, kChunk);
  c.digest_gbps_per_core = 1.41;
  c.sign_ms = 5;
  // 32 trainer hosts x 64 cores x 1.41 GB/s: 2.9 TB/s, slower than staging (6.4 TB/s).
  c.trainer_digest_cores = 64;
  const sim::UpdateTimes digested = sim::update_times(c, kRollouts, kBytes, kChunk);
  CHECK(digested.stage_s == doctest::Approx(free.stage_s));  // the actor's stall is the copy
  CHECK(digested.digest_s == doctest::Approx(2e12 / (32 * 64 * 1.41e9)));
  CHECK(digested.relays_start_s == doctest::Approx(digested.digest_s + 0.005));
  CHECK(digested.last_relay_s - digested.relays_start_s ==
        doctest::Approx(free.last_relay_s - free.relays_start_s));
  // A relay host verifying with 96 cores takes in 135 GB/s, not its link's 400: the relay stage
  // is the share over that rate, and twice the cores halve it.
  c.relay_digest_cores = 96;
  const sim::UpdateTimes verified = sim::update_times(c, kRollouts, kBytes, kChunk);
  const double share = 2e12 / 4;
  CHECK(verified.last_relay_s - verified.relays_start_s ==
        doctest::Approx(share / (96 * 1.41e9)).epsilon(0.01));
  c.relay_digest_cores = 192;
  const sim::UpdateTimes twice = sim::update_times(c, kRollouts, kBytes, kChunk);
  CHECK(twice.last_relay_s - twice.relays_start_s ==
        doctest::Approx((verified.last_relay_s - verified.relays_start_s) / 2).epsilon(0.01));
}

TEST_CASE(
    "streamed signatures: relays start during staging and end no sooner than the last "
    "batch") {
  sim::SimulateConfig c = one_t("host-share");
  c.h2d_gbps = 54.3;  // a GPU loads its 62.5 GB in 1.15 s, less than the relays take
  c.digest_gbps_per_core = 1.41;
  c.sign_ms = 5;
  c.trainer_digest_cores = 64;
  const sim::UpdateTimes after = sim::update_times(c, kRollouts, kBytes, kChunk);
  c.signing = "streamed";
  const sim::UpdateTimes streamed = sim::update_times(c, kRollouts, kBytes, kChunk);
  // The first batch: 16 chunks of one trainer host at its 90 GB/s, and a signature.
  CHECK(streamed.relays_start_s ==
        doctest::Approx(16.0 * kChunk / (64 * 1.41e9) + 0.005).epsilon(1e-3));
  CHECK(streamed.relays_start_s < streamed.stage_s);
  CHECK(streamed.switch_end_s < after.switch_end_s);
  // The relays' stage (500 GB at 400 GB/s) is longer than the trainer's digests: they bind.
  CHECK(streamed.last_relay_s == doctest::Approx(streamed.relays_start_s + 1.25).epsilon(0.01));
  // The GPUs load while their relays receive, from the announcement on: the update ends with
  // the last relay's last chunk, not a whole load after the staging.
  CHECK(streamed.switch_end_s == doctest::Approx(streamed.last_relay_s).epsilon(0.01));
  CHECK(streamed.switch_end_s < streamed.stage_s + sim::switch_s(c, kBytes));
  // A trainer that digests slower than the relays read: the last relay waits for the last
  // batch's signature, whatever the links.
  c.trainer_digest_cores = 4;  // 180 GB/s in all: 11.1 s
  c.link_gbps = c.trainer_gbps = 3200;
  const sim::UpdateTimes slow = sim::update_times(c, kRollouts, kBytes, kChunk);
  CHECK(slow.last_relay_s >= slow.digest_s + 0.005);
  CHECK(slow.last_relay_s == doctest::Approx(slow.digest_s + 0.005).epsilon(0.01));
}
