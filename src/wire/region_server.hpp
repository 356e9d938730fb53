// Exposing registered memory to readers over the control plane. A region server answers
// "region.describe" on a messaging Server with a region's chunk layout (bytes, chunk size, a
// checksum per chunk) and its RegionDescriptor, so that a reader can GET it chunk by chunk.
//
// Thread safety: loop thread only. The RegionServer keeps references to the Server and to the
// exposed buffers: they must outlive it (or be withdrawn first).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "wire/messaging.hpp"
#include "wire/transfer.hpp"

namespace sluice::core {

struct RegionLayout {
  std::string name;
  std::uint64_t bytes = 0;
  std::uint64_t chunk_bytes = 0;
  std::vector<std::uint64_t> checksums;  // one per chunk; the last chunk may be short
  // Empty, or one SHA-256 per chunk (a signed version's, format/manifest.hpp): reads of the region
  // are then verified against these instead of the checksums.
  std::vector<Digest> digests;

  std::uint64_t chunk_count() const;
  std::uint64_t chunk_offset(std::uint64_t i) const { return i * chunk_bytes; }
  std::uint64_t chunk_size(std::uint64_t i) const;
  // Checks that the numbers agree (chunk count, sizes); the error names what is wrong.
  Status validate() const;
};

// Computes the layout (a checksum and a digest per chunk) of `bytes` at `data`.
Result<RegionLayout> make_layout(std::string name, const std::uint8_t* data, std::uint64_t bytes,
                                 std::uint64_t chunk_bytes);

class RegionServer {
 public:
  // Registers the "region.describe" and "region.list" handlers on `server`.
  static Result<std::unique_ptr<RegionServer>> create(Server& server);
  ~RegionServer();
  RegionServer(const RegionServer&) = delete;
  RegionServer& operator=(const RegionServer&) = delete;

  // Exposes `buf` under `name` with a layout computed now from its bytes (which the descriptor
  // therefore says are verified: RegionDescriptor::verified).
  Status expose(const std::string& name, const RegisteredBuffer& buf, std::uint64_t chunk_bytes);
  // Exposes `buf` with a layout the caller computed (it must match buf's size). `verified`: the
  // caller made or verified every byte against the layout (the descriptor says so).
  Status expose(const RegisteredBuffer& buf, RegionLayout layout, bool verified = false);
  void withdraw(const std::string& name);

 private:
  RegionServer() = default;
  struct Entry {
    const RegisteredBuffer* buf;
    RegionLayout layout;
    bool verified = false;
  };
  std::map<std::string, Entry> regions_;
};

struct RemoteRegion {
  std::string endpoint;  // the control endpoint it was described by
  RegionLayout layout;
  RegionDescriptor descriptor;
};

// Asks the region server behind `client` for `name`; validates the reply.
Result<RemoteRegion> describe_region(Client& client, const std::string& name, Millis timeout);

// The chunk list that reads a whole region into a buffer of the same layout, from any source.
std::vector<ChunkRead> whole_region_chunks(const RegionLayout& layout);

}  // namespace sluice::core
