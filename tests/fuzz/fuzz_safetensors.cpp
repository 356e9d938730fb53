// libFuzzer target: the header of a safetensors file (weights loaded from disk). The first
// eight input bytes say how large the file claims to be; the rest is the file's start.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "format/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 8) return 0;
  std::uint64_t file_size = 0;
  std::memcpy(&file_size, data, 8);
  auto h = sluice::core::parse_safetensors_header(data + 8, size - 8, file_size);
  if (!h.is_ok()) return 0;
  return 0;
}
