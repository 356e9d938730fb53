// SHA-256 (FIPS 180-4) written once for the host and the device: every function here is marked
// SLUICE_HD, which is `__host__ __device__` when nvcc compiles the file and nothing otherwise, so
// the CUDA kernel that verifies chunks on a GPU (core/device_digest.cu) and a host test run the
// very same code. The host's production digest stays OpenSSL's (core/checksum.hpp's
// chunk_digest, with the CPU's SHA instructions); tests/core/sha256_test.cpp checks that this
// code gives OpenSSL's digests.
//
// The `#if`s below are not optional features but the compiler in use: nvcc defines __CUDACC__ in
// both of its passes over a .cu file (__CUDA_ARCH__ in the device pass only), and the host
// compiler never does.
//
// SHA-256 of one message is a chain: each 64-byte block is compressed into the state the blocks
// before it left, so one message is hashed by one thread. Many messages (chunks) are what a GPU
// hashes at once.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define SLUICE_HD __host__ __device__
#else
#define SLUICE_HD
#endif
// Loops unrolled in the device pass only (__CUDA_ARCH__): the host compiler knows no such pragma.
#if defined(__CUDA_ARCH__)
#define SLUICE_UNROLL _Pragma("unroll")
#else
#define SLUICE_UNROLL
#endif

namespace sluice::core::sha256 {

inline constexpr std::size_t kBlockBytes = 64;
inline constexpr std::size_t kDigestBytes = 32;

SLUICE_HD inline std::uint32_t rotr(std::uint32_t x, unsigned n) {
  return (x >> n) | (x << (32u - n));
}

// The six functions of FIPS 180-4 section 4.1.2.
SLUICE_HD inline std::uint32_t ch(std::uint32_t x, std::uint32_t y, std::uint32_t z) {
  return (x & y) ^ (~x & z);
}
SLUICE_HD inline std::uint32_t maj(std::uint32_t x, std::uint32_t y, std::uint32_t z) {
  return (x & y) ^ (x & z) ^ (y & z);
}
SLUICE_HD inline std::uint32_t big_sigma0(std::uint32_t x) {
  return rotr(x, 2) ^ rotr(x, 13) ^ rotr(x, 22);
}
SLUICE_HD inline std::uint32_t big_sigma1(std::uint32_t x) {
  return rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25);
}
SLUICE_HD inline std::uint32_t small_sigma0(std::uint32_t x) {
  return rotr(x, 7) ^ rotr(x, 18) ^ (x >> 3);
}
SLUICE_HD inline std::uint32_t small_sigma1(std::uint32_t x) {
  return rotr(x, 17) ^ rotr(x, 19) ^ (x >> 10);
}

SLUICE_HD inline std::uint32_t load_be32(const std::uint8_t* p) {
  return (static_cast<std::uint32_t>(p[0]) << 24) | (static_cast<std::uint32_t>(p[1]) << 16) |
         (static_cast<std::uint32_t>(p[2]) << 8) | static_cast<std::uint32_t>(p[3]);
}

SLUICE_HD inline void store_be32(std::uint32_t v, std::uint8_t* p) {
  p[0] = static_cast<std::uint8_t>(v >> 24);
  p[1] = static_cast<std::uint8_t>(v >> 16);
  p[2] = static_cast<std::uint8_t>(v >> 8);
  p[3] = static_cast<std::uint8_t>(v);
}

// The initial hash value (section 5.3.3): the first 32 bits of the fractional parts of the
// square roots of the first 8 primes.
SLUICE_HD inline void init(std::uint32_t h[8]) {
  h[0] = 0x6a09e667u;
  h[1] = 0xbb67ae85u;
  h[2] = 0x3c6ef372u;
  h[3] = 0xa54ff53au;
  h[4] = 0x510e527fu;
  h[5] = 0x9b05688cu;
  h[6] = 0x1f83d9abu;
  h[7] = 0x5be0cd19u;
}

// One block (section 6.2.2), given as its 16 big-endian words. The message schedule is kept as a
// ring of 16 words (W[t] replaces W[t-16]), which keeps a GPU thread's state in registers.
SLUICE_HD inline void compress(std::uint32_t h[8], const std::uint32_t block[16]) {
  // The constants K (section 4.2.2): the first 32 bits of the fractional parts of the cube roots
  // of the first 64 primes. A local array: the device compiler unrolls the rounds and folds each
  // into an immediate operand.
  const std::uint32_t k[64] = {
      0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u,
      0xab1c5ed5u, 0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu,
      0x9bdc06a7u, 0xc19bf174u, 0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu,
      0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau, 0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u,
      0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u, 0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu,
      0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u, 0xa2bfe8a1u, 0xa81a664bu,
      0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u, 0x19a4c116u,
      0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
      0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u,
      0xc67178f2u};
  std::uint32_t w[16];
  SLUICE_UNROLL
  for (int t = 0; t < 16; ++t)
    w[t] = block[t];
  std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
  std::uint32_t e = h[4], f = h[5], g = h[6], hh = h[7];
  SLUICE_UNROLL
  for (int t = 0; t < 64; ++t) {
    std::uint32_t wt = w[t & 15];
    if (t >= 16) {
      // W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16]; the ring holds W[t-16] at t & 15.
      wt += small_sigma1(w[(t + 14) & 15]) + w[(t + 9) & 15] + small_sigma0(w[(t + 1) & 15]);
      w[t & 15] = wt;
    }
    const std::uint32_t t1 = hh + big_sigma1(e) + ch(e, f, g) + k[t] + wt;
    const std::uint32_t t2 = big_sigma0(a) + maj(a, b, c);
    hh = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += hh;
}

// One block given as 64 bytes at any alignment.
SLUICE_HD inline void compress_bytes(std::uint32_t h[8], const std::uint8_t* block) {
  std::uint32_t w[16];
  SLUICE_UNROLL
  for (int t = 0; t < 16; ++t)
    w[t] = load_be32(block + 4 * t);
  compress(h, w);
}

// The end of a message of `total` bytes (section 5.1.1): its last `tail_bytes` (< 64) bytes, the
// bit 1, zeros, and the length in bits as a big-endian 64-bit number, in one or two blocks; then
// the digest, big-endian, into out.
SLUICE_HD inline void finish(std::uint32_t h[8], const std::uint8_t* tail, std::size_t tail_bytes,
                             std::uint64_t total, std::uint8_t out[kDigestBytes]) {
  std::uint8_t last[2 * kBlockBytes];
  for (std::size_t i = 0; i < sizeof last; ++i)
    last[i] = 0;
  for (std::size_t i = 0; i < tail_bytes; ++i)
    last[i] = tail[i];
  last[tail_bytes] = 0x80;
  // The length needs 8 bytes after the 0x80: a tail of 56 bytes or more spills into a second
  // block.
  const std::size_t blocks = tail_bytes + 1 + 8 <= kBlockBytes ? 1 : 2;
  const std::uint64_t bits = total * 8;
  std::uint8_t* length = last + blocks * kBlockBytes - 8;
  store_be32(static_cast<std::uint32_t>(bits >> 32), length);
  store_be32(static_cast<std::uint32_t>(bits), length + 4);
  for (std::size_t i = 0; i < blocks; ++i)
    compress_bytes(h, last + i * kBlockBytes);
  for (int i = 0; i < 8; ++i)
    store_be32(h[i], out + 4 * i);
}

// SHA-256 of `bytes` bytes at `data`, into out.
SLUICE_HD inline void digest(const std::uint8_t* data, std::uint64_t bytes,
                             std::uint8_t out[kDigestBytes]) {
  std::uint32_t h[8];
  init(h);
  const std::uint64_t full = bytes / kBlockBytes;
  for (std::uint64_t i = 0; i < full; ++i)
    compress_bytes(h, data + i * kBlockBytes);
  finish(h, data + full * kBlockBytes, static_cast<std::size_t>(bytes - full * kBlockBytes), bytes,
         out);
}

}  // namespace sluice::core::sha256
