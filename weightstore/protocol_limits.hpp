// The bounds the weight store's decoders hold a message to (weightstore/protocol.hpp). Apart from
// the protocol so that the pieces its decoders share (protocol_parts.hpp) need not include it.
//
// Thread safety: a plain value.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sluice::weightstore {

struct StoreDecodeLimits {
  std::size_t max_id_bytes = 256;  // a holder, relay, model or pin owner id
  std::size_t max_list = 1 << 20;  // entries in any list (chunks, holders, exclusions)
  // A manifest's size, tensors and chunks (the store's configuration sets them).
  std::uint64_t max_version_bytes = 256ull << 30;
  std::size_t max_tensors = 1 << 16;
  std::uint64_t max_chunks = 1 << 20;
};

}  // namespace sluice::weightstore
