// Chunk checksums: XXH3 64-bit (xxHash). Fast enough to verify every chunk on arrival at memory
// speed, and strong enough to catch torn or corrupted chunks (it is not a cryptographic hash).
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sluice::core {

std::uint64_t chunk_checksum(const void* data, std::size_t bytes);

// "xxh3:0123456789abcdef", the form used in manifests and logs.
std::string checksum_hex(std::uint64_t checksum);

}  // namespace sluice::core
