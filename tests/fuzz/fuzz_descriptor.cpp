// libFuzzer target: a region descriptor (binary) as a read plan carries it for each holder.
// Decoding returns a descriptor or an error; one it returns encodes back to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "wire/transfer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  auto d = sluice::core::RegionDescriptor::decode(bytes);
  if (!d.is_ok()) return 0;
  auto again = sluice::core::RegionDescriptor::decode(d->encode());
  if (!again.is_ok() || again->encode() != d->encode()) std::abort();
  return 0;
}
