#include "core/checksum.hpp"

#include <fmt/format.h>
// The dispatching entry point picks the widest vector unit the CPU has at run time (AVX2 or
// AVX-512 here): measured 27 GB/s on a cache-resident MiB against about 10 GB/s for the plain
// XXH3_64bits of Debian's build, which is compiled for SSE2.
#include <xxh_x86dispatch.h>

namespace sluice::core {

std::uint64_t chunk_checksum(const void* data, std::size_t bytes) {
  return XXH3_64bits_dispatch(data, bytes);
}

std::string checksum_hex(std::uint64_t checksum) {
  return fmt::format("xxh3:{:016x}", checksum);
}

}  // namespace sluice::core
