#include "bench/bench_digest.hpp"

#include <fmt/format.h>
#include <sodium.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

#include "bench/cpu_busy.hpp"
#include "core/checksum.hpp"
#include "core/units.hpp"

namespace sluice::cli {

namespace {

using HashFn = std::function<std::uint64_t(const std::uint8_t*, std::size_t)>;

// Each returns something of the hash so that the work cannot be optimised away.
HashFn hash_named(const std::string& name) {
  if (name == "xxh3") {
    return [](const std::uint8_t* p, std::size_t n) { return core::chunk_checksum(p, n); };
  }
  if (name == "sha256") {
    return [](const std::uint8_t* p, std::size_t n) -> std::uint64_t {
      return core::chunk_digest(p, n).bytes[0];
    };
  }
  if (name == "blake2b") {
    return [](const std::uint8_t* p, std::size_t n) -> std::uint64_t {
      unsigned char out[32];
      crypto_generichash(out, sizeof out, p, n, nullptr, 0);
      return out[0];
    };
  }
  return nullptr;
}

// Seconds for `threads` threads to hash every chunk once, chunks handed out in order.
double hash_all(const HashFn& fn, const std::vector<std::uint8_t>& data, std::size_t chunk,
                unsigned threads) {
  const std::size_t count = (data.size() + chunk - 1) / chunk;
  std::atomic<std::size_t> next{0};
  std::atomic<std::uint64_t> sink{0};
  auto work = [&] {
    std::uint64_t local = 0;
    for (std::size_t i = next++; i < count; i = next++) {
      const std::size_t off = i * chunk;
      local += fn(data.data() + off, std::min(chunk, data.size() - off));
    }
    sink += local;
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t)
    pool.emplace_back(work);
  work();
  for (auto& t : pool)
    t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (sink.load() == 0x5a5a5a5a5a5a5a5aull) std::fputs("", stdout);  // keeps the sums alive
  return s;
}

}  // namespace

int run_bench_digest(const BenchDigestArgs& args) {
  auto size = core::parse_bytes(args.size);
  auto chunk = core::parse_bytes(args.chunk);
  if (!size.is_ok() || *size == 0 || !chunk.is_ok() || *chunk == 0) {
    std::fprintf(stderr, "bench digest: --size and --chunk must be positive sizes (like 1GiB)\n");
    return 2;
  }
  if (args.rounds == 0 || args.link_gbps <= 0) {
    std::fprintf(stderr, "bench digest: --rounds must be at least 1 and --link-gbps positive\n");
    return 2;
  }
  if (args.device) return run_bench_digest_device(args, *size, *chunk);
  std::vector<std::pair<std::string, HashFn>> hashes;
  for (const auto& h : args.hashes) {
    HashFn fn = hash_named(h);
    if (!fn) {
      std::fprintf(stderr, "bench digest: unknown hash '%s' (xxh3, sha256, blake2b)\n", h.c_str());
      return 2;
    }
    hashes.emplace_back(h, std::move(fn));
  }
  if (sodium_init() < 0) {
    std::fprintf(stderr, "bench digest: libsodium failed to initialise\n");
    return 1;
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const unsigned many = args.threads > 0 ? args.threads : cores;
  std::vector<unsigned> counts = {1};
  if (many > 1) counts.push_back(many);

  std::vector<std::uint8_t> data(*size);
  core::fill_pseudo_random(data.data(), data.size(), 1);
  const std::string load_before = load_average();
  const CpuTimes cpu_before = read_cpu_times();
  nlohmann::json rows = nlohmann::json::array();
  if (!args.json) {
    std::printf("bench digest: %s in chunks of %s, best of %u rounds, %u cores here\n",
                args.size.c_str(), args.chunk.c_str(), args.rounds, cores);
    std::printf("%-8s %7s %8s %14s %22s\n", "hash", "threads", "GB/s", "core-s per GB",
                fmt::format("cores for {:g} GB/s", args.link_gbps).c_str());
  }
  for (const auto& [name, fn] : hashes) {
    for (unsigned threads : counts) {
      double best = 0;
      for (unsigned r = 0; r < args.rounds; ++r) {
        const double s = hash_all(fn, data, *chunk, threads);
        if (best == 0 || s < best) best = s;
      }
      const double gbps = static_cast<double>(data.size()) / best / 1e9;
      const double core_s = threads / gbps;
      const double per_core = gbps / threads;
      const double needed = args.link_gbps / per_core;
      rows.push_back({{"hash", name},
                      {"threads", threads},
                      {"gb_per_s", gbps},
                      {"core_seconds_per_gb", core_s},
                      {"cores_for_link", needed}});
      if (!args.json) {
        std::printf("%-8s %7u %8.2f %14.3f %22.1f\n", name.c_str(), threads, gbps, core_s, needed);
      }
    }
  }
  const double busy = cpu_busy_fraction(cpu_before, read_cpu_times());
  const std::string load_after = load_average();
  if (args.json) {
    nlohmann::json out = {{"size", *size},
                          {"chunk", *chunk},
                          {"cores", cores},
                          {"link_gb_per_s", args.link_gbps},
                          {"rows", rows},
                          {"load_before", load_before},
                          {"load_after", load_after},
                          {"cpu_busy", busy}};
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf(
        "load average before %s, after %s; CPU busy %.1f%% over the run (the bench's own "
        "threads included)\n",
        load_before.c_str(), load_after.c_str(), 100.0 * busy);
  }
  return 0;
}

}  // namespace sluice::cli
