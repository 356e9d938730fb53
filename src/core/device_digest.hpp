// Chunk digests computed on the GPU that holds the chunks: SHA-256 of many chunks of device
// memory at once, by core/sha256.hpp's code compiled for the device (core/device_digest.cu), so
// that bytes a GPU loads can be checked against their signed digests without copying them back
// to the host.
//
// One chunk per GPU thread. SHA-256 of one chunk is a chain of compressions, one 64-byte block
// after the other, so the threads of a block cannot share a chunk; what a GPU has in parallel is
// chunks. Threads run in blocks of 32 (one warp), so that a few hundred chunks spread over every
// SM instead of filling a few. The cost of that choice: a chunk takes one thread's time, which
// for a 64 MiB chunk is seconds (1,048,576 compressions in a row), against tens of milliseconds
// on a CPU core with SHA instructions; a GPU is fast only with thousands of chunks in flight.
// `sluice bench digest --device` measures both (docs/benchmarks.md; scripts/gpu_check.sh).
//
// Built with or without CUDA (device_digest.cu / device_digest_none.cpp); without CUDA or a
// device the calls fail with failed_precondition saying so.
//
// Thread safety: any thread (each call has a stream and device memory of its own, and leaves the
// thread's current device as it found it).
#pragma once

#include <cstdint>
#include <vector>

#include "core/checksum.hpp"
#include "core/status.hpp"

namespace sluice::core {

// `bytes` of device memory at `data` (null when bytes is 0).
struct DeviceChunk {
  const void* data = nullptr;
  std::uint64_t bytes = 0;
};

// True when this build has CUDA and the machine a device: device_chunk_digests can run.
bool device_digest_available();

// chunk_digest of each chunk, computed on the device that holds them, in the order given.
// failed_precondition without CUDA or a device; invalid_argument for a chunk that is not device
// memory, or chunks on different devices; internal with CUDA's error when the kernel or a copy
// fails. The chunks must not change until it returns.
Result<std::vector<Digest>> device_chunk_digests(const std::vector<DeviceChunk>& chunks);

}  // namespace sluice::core
