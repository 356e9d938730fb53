// Chunk checksums and digests computed on threads of their own (one by default), so that verifying
// a chunk overlaps with moving the next ones instead of adding to the loop thread's time (measured
// here: XXH3 runs at about 7-9 GB/s per core, about the speed of a same-host copy, so verifying
// inline would cost close to half of a shared-memory read's throughput).
//
// Thread safety: submit() and the destructor are called on the loop thread; `done` callbacks run
// on the loop thread. Destroying the worker drops results not yet delivered (their callbacks
// never run).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/checksum.hpp"
#include "core/event_loop.hpp"
#include "core/status.hpp"

namespace sluice::core {

class HashWorker {
 public:
  explicit HashWorker(EventLoop& loop, unsigned threads = 1);
  ~HashWorker();
  HashWorker(const HashWorker&) = delete;
  HashWorker& operator=(const HashWorker&) = delete;

  // Computes chunk_sums(data, bytes, kind) on a worker thread and posts done(sums) to the loop.
  // The bytes must stay unchanged until done runs.
  void submit(const std::uint8_t* data, std::size_t bytes, SumKind kind,
              std::function<void(ChunkSums)> done);
  // Copies src to dst on a worker thread, hashing the bytes as it copies (copy_with_sums), and
  // posts done(sums) to the loop. Both ranges must stay valid and src unchanged until done runs.
  void submit_copy(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes, SumKind kind,
                   std::function<void(ChunkSums)> done);
  // device_chunk_sums(data, bytes, kind) of CUDA device memory (copied to the host first) on a
  // worker thread; posts done(sums or the CUDA error) to the loop.
  void submit_device(const std::uint8_t* device_data, std::size_t bytes, SumKind kind,
                     std::function<void(Result<ChunkSums>)> done);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::core
