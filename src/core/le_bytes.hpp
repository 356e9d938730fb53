// Little-endian integers in wire formats: the low `bytes` bytes of a value, lowest first.
#pragma once

#include <cstdint>

namespace sluice::core {

inline void put_u(std::uint8_t* p, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

inline std::uint64_t get_u(const std::uint8_t* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace sluice::core
