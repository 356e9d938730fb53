#include "core/checksum.hpp"

#include <fmt/format.h>
#include <xxhash.h>

namespace sluice::core {

std::uint64_t chunk_checksum(const void* data, std::size_t bytes) {
  return XXH3_64bits(data, bytes);
}

std::string checksum_hex(std::uint64_t checksum) { return fmt::format("xxh3:{:016x}", checksum); }

}  // namespace sluice::core
