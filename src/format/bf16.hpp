// bfloat16: the upper 16 bits of an IEEE fp32 value (sign, 8 exponent bits, 7 mantissa bits).
// The actor keeps fp32 master weights and may publish them rounded to bf16 (half the bytes);
// consecutive bf16 versions differ in few values when an update moves weights by less than half
// a bf16 step, which is what makes their deltas small (format/delta.hpp).
//
// Rounding is IEEE round-to-nearest, ties to even, as PyTorch's and CUDA's fp32 -> bf16
// conversions do: an fp32 value exactly halfway between two bf16 values goes to the one whose
// last mantissa bit is 0. Infinities stay infinities; finite values beyond the largest bf16
// round to infinity; every NaN stays a NaN (its sign and the top 7 bits of its payload kept, and
// quieted, so a signalling NaN whose payload sits in the low 16 bits does not become an
// infinity). Widening (bf16 -> fp32) is exact.
//
// Buffers are little-endian, 2 bytes per value, as the published tensors hold them.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "core/status.hpp"

namespace sluice::core {

inline std::uint16_t bf16_from_f32(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u)  // NaN: keep it one, quiet
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  // Adding 0x7fff (+1 when the kept part is odd) carries into bit 16 exactly when the dropped
  // half is above the midpoint, or at it with an odd kept part.
  const std::uint32_t odd = (bits >> 16) & 1u;
  return static_cast<std::uint16_t>((bits + 0x7fffu + odd) >> 16);
}

inline float f32_from_bf16(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Rounds every value of `in` into `out` (2 bytes each, little-endian). invalid_argument unless
// out.size() == 2 * in.size().
Status round_to_bf16(std::span<const float> in, std::span<std::uint8_t> out);
// Widens `in` (2 bytes a value, little-endian) into `out`. invalid_argument unless
// in.size() == 2 * out.size().
Status widen_bf16(std::span<const std::uint8_t> in, std::span<float> out);

}  // namespace sluice::core
