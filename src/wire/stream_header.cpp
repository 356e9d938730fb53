#include "wire/stream_header.hpp"

#include <string>

namespace sluice::core::stream_header {

Status check_size(std::string_view what, std::size_t n, std::size_t want) {
  if (n == want) return {};
  return protocol_error("chunk stream " + std::string(what) + " of " + std::to_string(n) +
                        " bytes, not " + std::to_string(want));
}

void write(ByteWriter& w, std::string_view magic) {
  w.put(magic).u16(kChunkStreamVersion);
}

bool read(ByteReader& r, std::string_view magic) {
  const bool same = r.view(kMagicBytes) == magic;
  const bool version = r.u16() == kChunkStreamVersion;
  return r.ok() && same && version;
}

bool starts_with(const std::uint8_t* p, std::string_view magic) {
  ByteReader r(p, kMagicBytes);
  return r.view(kMagicBytes) == magic;
}

}  // namespace sluice::core::stream_header
