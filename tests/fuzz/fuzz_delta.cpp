// libFuzzer target: a delta blob as a reader receives it from a holder. Whatever the bytes,
// parsing returns a view or an error; a view it returns is consistent (payloads in order, inside
// the blob, filling it), and applying it to a base of the right size returns an error or
// rebuilds every chunk without reading or writing out of bounds (ASan watches).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "format/delta.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::uint8_t> blob(data, size);
  auto v = sluice::core::parse_delta(blob);
  if (!v.is_ok()) return 0;
  std::uint64_t at =
      sluice::core::kDeltaHeaderBytes + v->chunks.size() * sluice::core::kDeltaEntryBytes;
  for (const auto& c : v->chunks) {
    if (c.offset != at) std::abort();
    at += c.bytes;
  }
  if (at != size) std::abort();
  // Applied only to versions of a size a test can hold (the header may claim any size).
  if (v->header.total_bytes > (4u << 20)) return 0;
  std::vector<std::uint8_t> base(v->header.total_bytes, 0x3c);
  std::vector<std::uint8_t> out(v->header.total_bytes);
  (void)sluice::core::apply_delta(blob, base, out);
  return 0;
}
