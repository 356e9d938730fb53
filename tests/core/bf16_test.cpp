// fp32 -> bf16 rounding against a reference that picks the nearest bf16 value by arithmetic
// (ties to the even one), and the special values a user relies on: infinities stay, NaNs stay
// NaNs, widening is exact.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <ios>
#include <limits>
#include <vector>

#include "format/bf16.hpp"

using namespace sluice;

namespace {

std::uint32_t bits_of(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float float_of(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// The two bf16 neighbours of a finite fp32 value are its upper half truncated and that plus one
// step away from zero; the reference takes whichever is nearer in exact (double) arithmetic, the
// one with an even last bit on a tie. One step past the largest finite bf16 is 2^128 in value,
// encoded as infinity, as IEEE's overflow rule has it.
std::uint16_t reference_bf16(float f) {
  const std::uint32_t b = bits_of(f);
  const auto lo = static_cast<std::uint16_t>(b >> 16);
  const auto hi = static_cast<std::uint16_t>(lo + 1);
  const double x = f;
  const double vlo = float_of(static_cast<std::uint32_t>(lo) << 16);
  const bool hi_inf = (hi & 0x7fffu) == 0x7f80u;
  const double vhi = hi_inf ? std::copysign(std::ldexp(1.0, 128), x)
                            : static_cast<double>(float_of(static_cast<std::uint32_t>(hi) << 16));
  const double dlo = std::fabs(x - vlo), dhi = std::fabs(vhi - x);
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1u) == 0 ? lo : hi;
}

}  // namespace

TEST_SUITE("core") {
  TEST_CASE("bf16 rounding equals the nearest-even reference on every exponent and tie") {
    // Every upper half, with the lower halves that sit at and around the rounding boundaries.
    const std::uint32_t lows[] = {0x0000, 0x0001, 0x3fff, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff};
    std::size_t checked = 0;
    for (std::uint32_t up = 0; up <= 0xffff; ++up) {
      for (std::uint32_t low : lows) {
        const float f = float_of((up << 16) | low);
        if (std::isnan(f) || std::isinf(f)) continue;
        const std::uint16_t got = core::bf16_from_f32(f);
        if (got != reference_bf16(f)) {
          FAIL("bits 0x" << std::hex << ((up << 16) | low) << " rounded to 0x" << got
                         << ", reference 0x" << reference_bf16(f));
        }
        ++checked;
      }
    }
    // And pseudo-random bit patterns.
    std::uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 1000000; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      const float f = float_of(static_cast<std::uint32_t>(x));
      if (std::isnan(f) || std::isinf(f)) continue;
      REQUIRE(core::bf16_from_f32(f) == reference_bf16(f));
      ++checked;
    }
    CHECK(checked > 1400000);
  }

  TEST_CASE("bf16 ties go to the even neighbour") {
    // 1 + 2^-8 lies halfway between 1 (0x3f80, even) and 1 + 2^-7 (0x3f81).
    CHECK(core::bf16_from_f32(1.0f + 0x1p-8f) == 0x3f80);
    // 1 + 3 x 2^-8 lies halfway between 0x3f81 and 0x3f82 (even).
    CHECK(core::bf16_from_f32(1.0f + 3 * 0x1p-8f) == 0x3f82);
    CHECK(core::bf16_from_f32(-(1.0f + 3 * 0x1p-8f)) == 0xbf82);
    // Just above the midpoint goes up.
    CHECK(core::bf16_from_f32(float_of(0x3f808001)) == 0x3f81);
  }

  TEST_CASE("bf16 keeps infinities, overflows to infinity and keeps every NaN a NaN") {
    const float inf = std::numeric_limits<float>::infinity();
    CHECK(core::bf16_from_f32(inf) == 0x7f80);
    CHECK(core::bf16_from_f32(-inf) == 0xff80);
    CHECK(core::bf16_from_f32(std::numeric_limits<float>::max()) == 0x7f80);
    CHECK(core::bf16_from_f32(-std::numeric_limits<float>::max()) == 0xff80);
    CHECK(core::bf16_from_f32(0.0f) == 0x0000);
    CHECK(core::bf16_from_f32(-0.0f) == 0x8000);
    // A NaN whose payload is only in the low bits would truncate to infinity; it must not.
    for (std::uint32_t nan : {0x7f800001u, 0xff800001u, 0x7fc00000u, 0xffffffffu, 0x7fbfffffu}) {
      const std::uint16_t h = core::bf16_from_f32(float_of(nan));
      CHECK(std::isnan(core::f32_from_bf16(h)));
      CHECK((h & 0x8000u) == ((nan >> 16) & 0x8000u));  // the sign stays
    }
  }

  TEST_CASE("bf16 widening is exact: every bf16 value survives a round trip") {
    for (std::uint32_t h = 0; h <= 0xffff; ++h) {
      const float f = core::f32_from_bf16(static_cast<std::uint16_t>(h));
      CHECK(bits_of(f) == h << 16);
      if (std::isnan(f)) continue;
      REQUIRE(core::bf16_from_f32(f) == h);
    }
  }

  TEST_CASE("bf16 buffers: little-endian, two bytes a value, sizes checked") {
    const std::vector<float> in = {1.0f, -2.5f, 0x1p-130f};
    std::vector<std::uint8_t> out(6);
    REQUIRE(core::round_to_bf16(in, out).is_ok());
    CHECK(out == std::vector<std::uint8_t>{0x80, 0x3f, 0x20, 0xc0, 0x08, 0x00});
    std::vector<float> back(3);
    REQUIRE(core::widen_bf16(out, back).is_ok());
    CHECK(back[0] == 1.0f);
    CHECK(back[1] == -2.5f);
    CHECK(back[2] == 0x1p-130f);

    std::vector<std::uint8_t> short_out(5);
    auto st = core::round_to_bf16(in, short_out);
    CHECK(st.code() == core::Code::kInvalidArgument);
    CHECK(st.message().find("need 6 bytes") != std::string::npos);
    std::vector<float> wrong(2);
    CHECK(core::widen_bf16(out, wrong).code() == core::Code::kInvalidArgument);
  }
}
