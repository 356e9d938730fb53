#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <string>

#include "core/bytes.hpp"

using namespace sluice::core;

TEST_CASE("bytes: what a writer writes, a reader reads back in order") {
  std::string out;
  ByteWriter w(out);
  w.put("SLXX").u8(0xab).u16(0x1234).u32(0xdeadbeef).u64(0x0102030405060708ull);
  w.u(0x0a0b0c, 3).f32(1.5f).f64(-2.25).zeros(3).put(std::string("tail"));
  CHECK(w.ok());
  CHECK(w.pos() == out.size());
  CHECK(out.size() == 4 + 1 + 2 + 4 + 8 + 3 + 4 + 8 + 3 + 4);
  // Little-endian: the lowest byte first.
  CHECK(static_cast<std::uint8_t>(out[5]) == 0x34);
  CHECK(static_cast<std::uint8_t>(out[6]) == 0x12);

  ByteReader r(out);
  CHECK(r.view(4) == "SLXX");
  CHECK(r.u8() == 0xab);
  CHECK(r.u16() == 0x1234);
  CHECK(r.u32() == 0xdeadbeef);
  CHECK(r.u64() == 0x0102030405060708ull);
  CHECK(r.u(3) == 0x0a0b0c);
  CHECK(r.f32() == 1.5f);
  CHECK(r.f64() == -2.25);
  std::uint8_t zeros[3] = {1, 1, 1};
  CHECK(r.copy(zeros, sizeof zeros));
  CHECK((zeros[0] == 0 && zeros[1] == 0 && zeros[2] == 0));
  CHECK(r.view(4) == "tail");
  CHECK(r.at_end());
  CHECK(r.ok());
}

TEST_CASE("bytes: a read past the end fails, reads nothing outside, and stays failed") {
  // The reader sees the first 6 bytes only; the rest must never be read.
  const std::array<std::uint8_t, 8> bytes = {1, 2, 3, 4, 5, 6, 0xee, 0xee};
  ByteReader r(bytes.data(), 6);
  CHECK(r.u32() == 0x04030201);
  CHECK(r.left() == 2);
  CHECK(r.u32() == 0);  // 2 left: fails, nothing of the 0xee bytes
  CHECK_FALSE(r.ok());
  CHECK(r.at_end());
  // Sticky: a read that would fit on its own fails too once the reader has failed.
  CHECK(r.u8() == 0);
  CHECK(r.view(0).empty());
  CHECK(r.data(0) == nullptr);
  CHECK_FALSE(r.ok());

  ByteReader v(bytes.data(), 6);
  CHECK(v.view(7).empty());
  CHECK_FALSE(v.ok());
  std::uint8_t to[8] = {9, 9, 9, 9, 9, 9, 9, 9};
  ByteReader c(bytes.data(), 6);
  CHECK_FALSE(c.copy(to, 7));
  CHECK(to[0] == 9);  // nothing copied
  CHECK_FALSE(c.ok());
}

TEST_CASE("bytes: a fixed writer that overflows fails and writes nothing past its buffer") {
  std::array<std::uint8_t, 8> buffer{};
  buffer.fill(0x55);
  ByteWriter w(buffer.data(), 6);
  w.u32(0x11223344);
  CHECK(w.ok());
  w.u32(0xaabbccdd);  // 2 bytes of room: refused whole
  CHECK_FALSE(w.ok());
  CHECK(w.pos() == 6);
  CHECK(buffer[4] == 0x55);
  CHECK(buffer[5] == 0x55);
  CHECK(buffer[6] == 0x55);
  // Sticky: nothing more is written, even what would fit.
  w.u8(0x77);
  CHECK_FALSE(w.ok());
  CHECK(buffer[4] == 0x55);

  std::array<std::uint8_t, 4> small{};
  ByteWriter z(small.data(), small.size());
  z.zeros(5);
  CHECK_FALSE(z.ok());

  ByteWriter exact(buffer.data(), 4);
  exact.u32(1);
  CHECK(exact.ok());
  CHECK(exact.pos() == 4);
}
