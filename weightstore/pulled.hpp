// What a read of a version delivers (weightstore/client.hpp's pull, and a shard read,
// weightstore/shard_read.hpp): apart from both so that neither includes the other.
//
// Thread safety: a plain value (it owns its buffer).
#pragma once

#include <cstdint>
#include <memory>

#include "format/manifest.hpp"
#include "wire/transfer.hpp"

namespace sluice::weightstore {

struct Pulled {
  core::Manifest manifest;
  std::unique_ptr<core::RegisteredBuffer> buffer;  // the version's bytes, verified chunk by chunk
  core::ReadStats stats;
  std::uint64_t same_host_bytes = 0;  // of stats.bytes, read from holders on the reader's host
  // A shard read (pull_async with a layout): `manifest` and `buffer` are the rollout's tensors,
  // version_bytes the whole version's size, and whole_chunks whether the layout was undeclared
  // and whole chunks were read (weightstore/shard_read.hpp).
  std::uint64_t version_bytes = 0;
  bool whole_chunks = false;
};

}  // namespace sluice::weightstore
