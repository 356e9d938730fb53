// Chunk digests computed on the GPU (core/device_digest.hpp): where there is a GPU, many chunks
// at once, at the padding's edge sizes and at odd alignments, each equal to OpenSSL's digest of
// the same bytes on the host. Without a GPU (or without CUDA) the calls fail cleanly and the
// cases say they skipped the rest.
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "core/checksum.hpp"
#include "core/cuda_device.hpp"
#include "core/device_copy.hpp"
#include "core/device_digest.hpp"

using namespace sluice::core;

namespace {

bool have_gpu() {
  auto d = cuda_devices();
  if (d.count == 0) MESSAGE("skipped: no CUDA device (" << d.why_none << ")");
  return d.count > 0;
}

// `host` copied into a new buffer on device 0.
std::unique_ptr<DeviceBuffer> on_device(const std::vector<std::uint8_t>& host) {
  auto buffer = DeviceBuffer::allocate(0, host.size());
  REQUIRE(buffer.is_ok());
  auto copier = DeviceCopier::create({});
  REQUIRE(copier.is_ok());
  auto layout = DeviceLayout::make({{(*buffer)->data(), 0, host.size()}}, host.size());
  REQUIRE(layout.is_ok());
  REQUIRE((*copier)->to_device(*layout, host.data()).is_ok());
  return std::move(*buffer);
}

}  // namespace

TEST_CASE("device digests: without a device the call fails cleanly") {
  if (device_digest_available()) {
    MESSAGE("skipped: a CUDA device is present (the no-device error is checked without one)");
    return;
  }
  std::vector<std::uint8_t> host(64, 1);
  auto r = device_chunk_digests({{host.data(), host.size()}});
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Code::kFailedPrecondition);
  // Nothing to hash needs no device.
  auto none = device_chunk_digests({});
  REQUIRE(none.is_ok());
  CHECK(none->empty());
}

TEST_CASE("device digests: many chunks at once equal OpenSSL's digests on the host (GPU)") {
  if (!have_gpu()) return;
  std::mt19937_64 rng(52);
  // Edge sizes of the padding, random sizes up to 1 MiB, and 256 small chunks: each placed at
  // an offset that is 16-byte aligned or not, in one buffer.
  std::vector<std::uint64_t> sizes = {0, 1, 55, 56, 63, 64, 65, 119, 120, 4096};
  std::uniform_int_distribution<std::uint64_t> size(0, 1u << 20);
  for (int i = 0; i < 16; ++i)
    sizes.push_back(size(rng));
  for (int i = 0; i < 256; ++i)
    sizes.push_back(4096 + static_cast<std::uint64_t>(i));
  std::vector<std::uint64_t> offsets;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    total += i % 3;  // every third chunk aligned as the previous one left it; others shifted
    offsets.push_back(total);
    total += sizes[i];
  }
  std::vector<std::uint8_t> host(total + 1);
  for (auto& b : host)
    b = static_cast<std::uint8_t>(rng());
  auto device = on_device(host);
  const auto* base = static_cast<const std::uint8_t*>(device->data());
  std::vector<DeviceChunk> chunks;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    chunks.push_back({sizes[i] ? base + offsets[i] : nullptr, sizes[i]});
  auto digests = device_chunk_digests(chunks);
  REQUIRE_MESSAGE(digests.is_ok(), digests.status().to_string());
  REQUIRE(digests->size() == sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    CAPTURE(i);
    CAPTURE(sizes[i]);
    CHECK((*digests)[i] == chunk_digest(host.data() + offsets[i], sizes[i]));
  }
}

TEST_CASE("device digests: host memory is refused, not read (GPU)") {
  if (!have_gpu()) return;
  std::vector<std::uint8_t> host(4096, 7);
  auto r = device_chunk_digests({{host.data(), host.size()}});
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
}
