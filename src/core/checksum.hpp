// What a chunk is checked against.
//
// - Checksums: XXH3 64-bit (xxHash). Fast enough to verify every chunk on arrival at memory
//   speed, and strong enough to catch torn or corrupted chunks. Not a cryptographic hash: two
//   different chunks with the same XXH3 can be built by hand (tests/core/digest_test.cpp keeps
//   such a pair), so a checksum only guards against accidents.
// - Digests: SHA-256 (OpenSSL's, which uses the CPU's SHA instructions where it has them). What
//   a version's signature covers (format/manifest.hpp): a member that serves other bytes than the
//   actor published cannot make them pass. Measured here (`sluice bench digest`) at about 1.4
//   GB/s per core against about 0.8 for libsodium's BLAKE2b; see docs/benchmarks.md.
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.hpp"

namespace sluice::core {

std::uint64_t chunk_checksum(const void* data, std::size_t bytes);

// Copies `bytes` from src to dst and returns chunk_checksum of the bytes written to dst, in one
// pass: each 64 KiB block of src is read once into a staging block in cache, hashed there, and
// written to dst with non-temporal stores (which skip reading the destination into cache first).
// Because src is read once, a src that changes during the call cannot give a dst whose bytes
// differ from the returned checksum: a torn copy fails verification. Measured on 1 GiB of
// distinct memory with two threads: about 11-12 GB/s against about 10 GB/s for memcpy, then a
// checksum (before the staging block; it adds a copy within L2).
std::uint64_t copy_with_checksum(void* dst, const void* src, std::size_t bytes);

namespace detail {
// Tests only: when set, called on the copying thread right after each block of src has been read
// (offset of the block; 0 for the single read of a small copy). A test changes src there to
// stand in for a writer racing the copy.
extern void (*copy_with_checksum_read_hook)(std::size_t offset);
}  // namespace detail

// "xxh3:0123456789abcdef", the form used in manifests and logs.
std::string checksum_hex(std::uint64_t checksum);

struct Digest {
  std::array<std::uint8_t, 32> bytes{};
  friend bool operator==(const Digest&, const Digest&) = default;
};

Digest chunk_digest(const void* data, std::size_t bytes);
// copy_with_checksum's single pass, with the digest of the bytes written to dst.
Digest copy_with_digest(void* dst, const void* src, std::size_t bytes);

// "sha256:" and 64 lowercase hex characters, the form used in manifests and logs.
inline constexpr std::string_view kDigestPrefix = "sha256:";
std::string digest_hex(const Digest& d);
// Parses digest_hex's form; anything else is invalid_argument naming `what`.
Result<Digest> parse_digest(std::string_view text, const std::string& what);

// Which of the two a verifier computes. A chunk with a signed digest is checked against the
// digest alone (it also catches every accident the checksum would).
enum class SumKind : std::uint8_t { checksum, digest, both };
struct ChunkSums {
  std::optional<std::uint64_t> checksum;
  std::optional<Digest> digest;
};
ChunkSums chunk_sums(const void* data, std::size_t bytes, SumKind kind);
ChunkSums copy_with_sums(void* dst, const void* src, std::size_t bytes, SumKind kind);

}  // namespace sluice::core
