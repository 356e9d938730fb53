// The weight-movement model (sim/weights.hpp) on the 1T-parameter update: what a
// reader of `sluice simulate --update-only` checks. Faster links shorten the relay stage in
// proportion, a host-share relay holds 1/hosts-per-rollout of the version, a GPU reads no chunk
// its relay does not hold, no arrangement ends below the line-rate floor, and GPUs that verify
// on the device as their shares land add the last chunk's verification.
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
        CHECK(u.stall_s == doctest::Approx(sim::switch_s(c, kBytes, kChunk)));
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
  CHECK(streamed.switch_end_s < streamed.stage_s + sim::switch_s(c, kBytes, kChunk));
  // A trainer that digests slower than the relays read: the last relay waits for the last
  // batch's signature, whatever the links.
  c.trainer_digest_cores = 4;  // 180 GB/s in all: 11.1 s
  c.link_gbps = c.trainer_gbps = 3200;
  const sim::UpdateTimes slow = sim::update_times(c, kRollouts, kBytes, kChunk);
  CHECK(slow.last_relay_s >= slow.digest_s + 0.005);
  CHECK(slow.last_relay_s == doctest::Approx(slow.digest_s + 0.005).epsilon(0.01));
}

namespace {

// The 1T update as examples/scale/1t_update.json runs it: streamed signatures, relays that
// forward without hashing, GPUs that load 54.3 GB/s.
sim::SimulateConfig gpus_verify() {
  sim::SimulateConfig c = one_t("host-share");
  c.h2d_gbps = 54.3;
  c.digest_gbps_per_core = 1.41;
  c.trainer_digest_cores = 64;
  c.sign_ms = 7.8;
  c.signing = "streamed";
  return c;
}

}  // namespace

TEST_CASE("device verification by hand: a thread's rate, chunks in flight, and the tail") {
  sim::SimulateConfig c = gpus_verify();
  // A GPU of 1,000 GB/s over 1,000 threads: 1 GB/s a thread. Its 62.5 GB share is 931.3 chunks
  // of 64 MiB, 932 at once: 932 GB/s; the last chunk takes 64 MiB / 1 GB/s = 67.1 ms.
  c.device_sha256_gbps = 1000;
  c.device_threads = 1000;
  sim::DeviceVerify v = sim::device_verify(c, kBytes, kChunk);
  CHECK(v.unit_bytes == doctest::Approx(67108864.0));
  CHECK(v.in_flight == doctest::Approx(932));
  CHECK(v.rate == doctest::Approx(932e9));
  CHECK(v.tail_s == doctest::Approx(0.067108864));
  // Faster than h2d: the load (62.5 GB at 54.3 GB/s, 1.151 s) and then the tail.
  CHECK(sim::switch_s(c, kBytes, kChunk) == doctest::Approx(62.5 / 54.3 + 0.067108864));
  // 64 KiB leaves: 953,675 of them, more than the threads: all 1,000 busy (1,000 GB/s); the tail
  // is a leaf (65,536 B at 1 GB/s) and the chunk's root over 1,024 digests of 32 B.
  c.device_digest_leaf_bytes = 64u << 10;
  v = sim::device_verify(c, kBytes, kChunk);
  CHECK(v.in_flight == doctest::Approx(1000));
  CHECK(v.rate == doctest::Approx(1000e9));
  CHECK(v.tail_s == doctest::Approx((65536.0 + 1024 * 32) / 1e9));
  // A GPU slower than h2d: 10 GB/s over 1,000 threads (10 MB/s each), 932 chunks at once, 9.32
  // GB/s: its share takes 6.706 s, and the last chunk 6.711 s after the load's 1.151 s.
  c.device_digest_leaf_bytes = 0;
  c.device_sha256_gbps = 10;
  v = sim::device_verify(c, kBytes, kChunk);
  CHECK(v.rate == doctest::Approx(9.32e9));
  CHECK(v.tail_s == doctest::Approx(6.7108864));
  CHECK(sim::switch_s(c, kBytes, kChunk) == doctest::Approx(62.5 / 54.3 + 6.7108864));
  // Not verifying on the device: the load alone.
  c.device_sha256_gbps = 0;
  CHECK(sim::switch_s(c, kBytes, kChunk) == doctest::Approx(62.5 / 54.3));
  CHECK(sim::device_verify(c, kBytes, kChunk).rate == 0);
}

TEST_CASE("GPUs verify their shares as they land: the last chunk's verification is the tail") {
  sim::SimulateConfig c = gpus_verify();
  const sim::UpdateTimes unverified = sim::update_times(c, kRollouts, kBytes, kChunk);
  CHECK(unverified.verify_tail_s == 0);
  // The relays stream 500 GB at 400 GB/s from the first signed batch: about 1.27 s.
  CHECK(unverified.switch_end_s == doctest::Approx(1.27).epsilon(0.01));
  // hashcat's H100 figure: 1,034.6 GB/s over 270,336 threads, 3.827 MB/s a thread; a 64 MiB
  // chunk is one thread's, 17.535 s after it lands.
  c.device_sha256_gbps = 1034.6;
  c.device_threads = 270336;
  const sim::DeviceVerify v = sim::device_verify(c, kBytes, kChunk);
  const double per_thread = 1034.6e9 / 270336;
  CHECK(per_thread == doctest::Approx(3.827e6).epsilon(1e-3));
  CHECK(v.rate == doctest::Approx(932 * per_thread));
  CHECK(v.tail_s == doctest::Approx(67108864 / per_thread));
  const sim::UpdateTimes chunks = sim::update_times(c, kRollouts, kBytes, kChunk);
  CHECK(chunks.verify_tail_s == doctest::Approx(v.tail_s));
  CHECK(chunks.switch_end_s == doctest::Approx(unverified.switch_end_s + v.tail_s).epsilon(1e-4));
  CHECK(chunks.switch_start_s == doctest::Approx(unverified.switch_start_s));
  CHECK(chunks.last_relay_s == doctest::Approx(unverified.last_relay_s));
  // 64 KiB leaves: 25.7 ms after the last chunk lands, within Perplexity's 1.3 s.
  c.device_digest_leaf_bytes = 64u << 10;
  const sim::UpdateTimes leaves = sim::update_times(c, kRollouts, kBytes, kChunk);
  CHECK(leaves.verify_tail_s == doctest::Approx((65536.0 + 32768) / per_thread));
  CHECK(leaves.switch_end_s ==
        doctest::Approx(unverified.switch_end_s + leaves.verify_tail_s).epsilon(1e-4));
  CHECK(leaves.switch_end_s <= 1.30);
}
