// A region descriptor: where a holder's registered memory lives and how a reader reaches it (its
// UCX worker and remote key, its chunk stream), as the holder hands it out inside read plans.
//
// Binary, little-endian: "SLRD", u16 version (kRegionDescriptorVersion), u16 0, u64 base,
// u64 length, u32 + worker address, u32 + rkey, u16 + host, u8 count of stream addresses each
// u16 + address, u8 + stream token, u8 stream encryption, u8 + datacenter, u32 holder uid, u8
// flags (bit 0: verified; the others must be 0) ("u32 +" is a length and then that many bytes).
//
// Thread safety: a value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "wire/stream_crypto.hpp"

namespace sluice::core {

inline constexpr std::uint16_t kRegionDescriptorVersion = 4;

// Where a region lives and how to read it. Serialized with a format version; decode rejects a
// truncated descriptor or one of another version.
struct RegionDescriptor {
  std::string worker_address;  // packed UCX worker address of the holder
  std::uint64_t base = 0;      // remote virtual address of byte 0
  std::uint64_t length = 0;
  std::string rkey;  // packed UCX remote key
  // The holder's machine (local_host_id(), wire/transport_choice.hpp): a reader on another one,
  // or one whose UCX may not use shared memory, reads over the chunk stream below when there is
  // one.
  std::string host;
  // The holder's chunk server ("ip:port", in the order to try them; at most 8) and this region's
  // token there (kStreamTokenBytes); both empty when the holder serves no chunk stream.
  std::vector<std::string> stream;
  std::string stream_token;
  // What the chunk server accepts (clear, either, encrypted only), and the holder's datacenter
  // label (TransferOptions::datacenter; empty: none): a reader decides from them whether to
  // encrypt (TransferOptions::stream_encryption).
  StreamCrypto stream_crypto = StreamCrypto::kClear;
  std::string datacenter;
  // Who holds the bytes and what the holder says of them, for "verify once per host" (design.md,
  // where bytes are verified). `uid`: the holder's effective user id. `verified`: every byte of
  // the region is one the holder verified against its signed digest, or made (the actor's own
  // publish); a partial or unchecked copy says false. Both are claims: a reader trusts them only
  // where the kernel confirms that the memory it copies from belongs to its own user on its own
  // host (wire/segment_owner.hpp), and then checks each chunk by its checksum alone; anything
  // else is checked against the signed digests.
  std::uint32_t uid = 0;
  bool verified = false;

  std::string encode() const;
  static Result<RegionDescriptor> decode(const std::string& bytes);
};

}  // namespace sluice::core
