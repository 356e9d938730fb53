// The byte codec every binary format is read and written with: a cursor over a span of bytes that
// reads or writes little-endian integers, floats and runs of bytes in order, checking bounds.
//
// A read past the end does not throw or touch memory outside the span: it returns zero (or an
// empty view), leaves the cursor at the end and marks the reader failed; ok() says whether every
// read so far fitted. A decoder reads its fields one after another and checks ok() once, with
// the checks on values (a magic, a version, a length) between. The writer works the same way
// over a fixed buffer, or appends to a std::string without bound.
//
// Thread safety: none; one cursor per thread.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace sluice::core {

class ByteReader {
 public:
  ByteReader(const void* data, std::size_t size)
      : p_(static_cast<const std::uint8_t*>(data)), size_(size) {}
  explicit ByteReader(std::string_view s) : ByteReader(s.data(), s.size()) {}

  // The low `bytes` bytes of a value (1 to 8), lowest first.
  std::uint64_t u(int bytes) {
    const auto n = static_cast<std::size_t>(bytes);
    if (!fits(n)) return 0;
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i)
      v |= static_cast<std::uint64_t>(p_[pos_ + i]) << (8 * i);
    pos_ += n;
    return v;
  }
  std::uint8_t u8() { return static_cast<std::uint8_t>(u(1)); }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u(2)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(u(4)); }
  std::uint64_t u64() { return u(8); }
  float f32() { return std::bit_cast<float>(u32()); }
  double f64() { return std::bit_cast<double>(u64()); }

  // The next n bytes, as a view into the span (empty when fewer are left).
  std::string_view view(std::size_t n) {
    if (!fits(n)) return {};
    std::string_view out(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return out;
  }
  const std::uint8_t* data(std::size_t n) {
    if (!fits(n)) return nullptr;
    const std::uint8_t* out = p_ + pos_;
    pos_ += n;
    return out;
  }
  // Copies the next n bytes to `to`; false (and nothing copied) when fewer are left.
  bool copy(void* to, std::size_t n) {
    const std::uint8_t* from = data(n);
    if (from == nullptr) return false;
    if (n > 0) std::memcpy(to, from, n);
    return true;
  }
  void skip(std::size_t n) { (void)data(n); }

  std::size_t pos() const { return pos_; }
  std::size_t left() const { return size_ - pos_; }
  bool at_end() const { return pos_ == size_; }
  bool ok() const { return ok_; }

 private:
  bool fits(std::size_t n) {
    if (ok_ && n <= size_ - pos_) return true;
    ok_ = false;
    pos_ = size_;
    return false;
  }

  const std::uint8_t* p_;
  std::size_t size_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

class ByteWriter {
 public:
  // Writes into a fixed buffer of `size` bytes.
  ByteWriter(void* data, std::size_t size) : p_(static_cast<std::uint8_t*>(data)), size_(size) {}
  // Appends to `out`, growing it.
  explicit ByteWriter(std::string& out) : grow_(&out) {}

  // The low `bytes` bytes of v (1 to 8), lowest first.
  ByteWriter& u(std::uint64_t v, int bytes) {
    std::uint8_t b[8];
    const auto n = static_cast<std::size_t>(bytes);
    for (std::size_t i = 0; i < n && i < sizeof b; ++i)
      b[i] = static_cast<std::uint8_t>(v >> (8 * i));
    return put(b, n <= sizeof b ? n : sizeof b);
  }
  ByteWriter& u8(std::uint8_t v) { return u(v, 1); }
  ByteWriter& u16(std::uint16_t v) { return u(v, 2); }
  ByteWriter& u32(std::uint32_t v) { return u(v, 4); }
  ByteWriter& u64(std::uint64_t v) { return u(v, 8); }
  ByteWriter& f32(float v) { return u32(std::bit_cast<std::uint32_t>(v)); }
  ByteWriter& f64(double v) { return u64(std::bit_cast<std::uint64_t>(v)); }
  ByteWriter& put(const void* from, std::size_t n) {
    if (grow_ != nullptr) {
      grow_->append(static_cast<const char*>(from), n);
      pos_ += n;
      return *this;
    }
    if (!ok_ || n > size_ - pos_) {
      ok_ = false;
      pos_ = size_;
      return *this;
    }
    if (n > 0) std::memcpy(p_ + pos_, from, n);
    pos_ += n;
    return *this;
  }
  ByteWriter& put(std::string_view s) { return put(s.data(), s.size()); }
  // n zero bytes (padding, reserved fields).
  ByteWriter& zeros(std::size_t n) {
    static constexpr std::uint8_t kZero[64] = {};
    while (n > 0 && ok_) {
      const std::size_t k = n < sizeof kZero ? n : sizeof kZero;
      put(kZero, k);
      n -= k;
    }
    return *this;
  }

  std::size_t pos() const { return pos_; }
  bool ok() const { return ok_; }

 private:
  std::uint8_t* p_ = nullptr;
  std::size_t size_ = 0;
  std::string* grow_ = nullptr;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace sluice::core
