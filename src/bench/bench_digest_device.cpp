// `sluice bench digest --device`: SHA-256 of chunks on each GPU (core/device_digest.hpp).
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "bench/bench_digest.hpp"
#include "bench/transfer_args.hpp"
#include "core/cuda_device.hpp"
#include "core/device_copy.hpp"
#include "core/device_digest.hpp"
#include "core/units.hpp"

namespace sluice::cli {

namespace {

struct DeviceRow {
  int gpu = 0;
  std::uint64_t chunks = 0;  // hashed at once, one per thread
  double seconds = 0;        // the best round
  double gb_per_s = 0;
};

// Fills every chunk of `buffer` with the same pseudo-random `host` bytes (the digests' values do
// not matter here, only their cost and that they are right).
core::Status fill(const core::DeviceBuffer& buffer, const std::vector<std::uint8_t>& host,
                  std::uint64_t chunks) {
  core::DeviceCopyOptions o;
  o.device = buffer.device();
  SLUICE_ASSIGN_OR_RETURN(auto copier, core::DeviceCopier::create(o));
  auto* base = static_cast<std::uint8_t*>(buffer.data());
  for (std::uint64_t k = 0; k < chunks; ++k) {
    SLUICE_ASSIGN_OR_RETURN(
        core::DeviceLayout layout,
        core::DeviceLayout::make({{base + k * host.size(), 0, host.size()}}, host.size()));
    SLUICE_TRY(copier->enqueue_to_device(layout, host.data(), 0, host.size()));
  }
  return copier->synchronize();
}

// The best of `rounds` rounds of hashing the first `n` chunks at once; checks every digest.
core::Result<DeviceRow> time_chunks(const core::DeviceBuffer& buffer, std::uint64_t chunk,
                                    std::uint64_t n, unsigned rounds, const core::Digest& expect) {
  std::vector<core::DeviceChunk> chunks;
  const auto* base = static_cast<const std::uint8_t*>(buffer.data());
  for (std::uint64_t k = 0; k < n; ++k)
    chunks.push_back({base + k * chunk, chunk});
  DeviceRow row;
  row.gpu = buffer.device();
  row.chunks = n;
  for (unsigned r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    SLUICE_ASSIGN_OR_RETURN(std::vector<core::Digest> digests, core::device_chunk_digests(chunks));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const core::Digest& d : digests) {
      if (d != expect) return core::data_loss("a device digest differs from OpenSSL's");
    }
    if (r == 0 || s < row.seconds) row.seconds = s;
  }
  row.gb_per_s = static_cast<double>(n * chunk) / row.seconds / 1e9;
  return row;
}

}  // namespace

int run_bench_digest_device(const BenchDigestArgs& args, std::uint64_t size, std::uint64_t chunk) {
  const core::CudaDevices devs = core::cuda_devices();
  if (devs.count == 0) {
    std::fprintf(stderr, "bench digest --device: skipped: no CUDA device (%s)\n",
                 devs.why_none.c_str());
    return kExitNoDevice;
  }
  const std::uint64_t n = size / chunk;
  if (n == 0) {
    std::fprintf(stderr, "bench digest --device: --size must hold at least one --chunk\n");
    return 2;
  }
  std::vector<std::uint8_t> host(chunk);
  core::fill_pseudo_random(host.data(), host.size(), 1);
  const core::Digest expect = core::chunk_digest(host.data(), host.size());
  if (!args.json) {
    std::printf(
        "bench digest --device: SHA-256 of %s chunks on each of %d GPU(s), one chunk per "
        "thread, best of %u rounds, each digest checked against OpenSSL's\n",
        args.chunk.c_str(), devs.count, args.rounds);
    std::printf("%4s %14s %10s %10s %16s\n", "gpu", "chunks at once", "seconds", "GB/s",
                "MB/s a thread");
  }
  nlohmann::json rows = nlohmann::json::array();
  for (int gpu = 0; gpu < devs.count; ++gpu) {
    auto buffer = core::DeviceBuffer::allocate(gpu, n * chunk);
    core::Status st = buffer.status();
    if (st.is_ok()) st = fill(**buffer, host, n);
    if (!st.is_ok()) {
      std::fprintf(stderr, "bench digest --device: gpu %d: %s\n", gpu, st.to_string().c_str());
      return 1;
    }
    std::vector<std::uint64_t> counts = {1};
    if (n > 1) counts.push_back(n);
    for (std::uint64_t at_once : counts) {
      auto row = time_chunks(**buffer, chunk, at_once, args.rounds, expect);
      if (!row.is_ok()) {
        std::fprintf(stderr, "bench digest --device: gpu %d: %s\n", gpu,
                     row.status().to_string().c_str());
        return 1;
      }
      const double per_thread = row->gb_per_s * 1e3 / static_cast<double>(at_once);
      rows.push_back({{"gpu", gpu},
                      {"chunk", chunk},
                      {"chunks", at_once},
                      {"seconds", row->seconds},
                      {"gb_per_s", row->gb_per_s},
                      {"mb_per_s_per_thread", per_thread}});
      if (!args.json) {
        std::printf("%4d %14llu %10.3f %10.3f %16.2f\n", gpu,
                    static_cast<unsigned long long>(at_once), row->seconds, row->gb_per_s,
                    per_thread);
      }
    }
  }
  if (args.json) {
    std::printf("%s\n",
                nlohmann::json{{"device", true}, {"chunk", chunk}, {"rows", rows}}.dump().c_str());
  }
  return 0;
}

}  // namespace sluice::cli
