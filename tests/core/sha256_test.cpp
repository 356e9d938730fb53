// The SHA-256 written once for host and device (core/sha256.hpp), built for the host: its digests
// equal OpenSSL's (chunk_digest) on the sizes where padding changes shape (a tail of 55 bytes
// fits the length in its block, 56 does not), on random sizes up to a few MiB, at every alignment.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/checksum.hpp"
#include "core/sha256.hpp"

using namespace sluice::core;

namespace {

Digest ours(const std::uint8_t* data, std::uint64_t bytes) {
  Digest d;
  sha256::digest(data, bytes, d.bytes.data());
  return d;
}

std::vector<std::uint8_t> random_bytes(std::mt19937_64& rng, std::size_t n) {
  std::vector<std::uint8_t> out(n);
  for (auto& b : out)
    b = static_cast<std::uint8_t>(rng());
  return out;
}

}  // namespace

TEST_CASE("sha256: the FIPS 180-4 examples") {
  const std::string abc = "abc";
  CHECK(digest_hex(ours(reinterpret_cast<const std::uint8_t*>(abc.data()), abc.size())) ==
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(digest_hex(ours(nullptr, 0)) ==
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  // Two blocks: 56 bytes leave no room for the length in the first.
  const std::string two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(digest_hex(ours(reinterpret_cast<const std::uint8_t*>(two.data()), two.size())) ==
        "sha256:248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("sha256: the host build equals OpenSSL's on the padding's edge sizes") {
  std::mt19937_64 rng(52);
  for (std::size_t n : {0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 127, 128, 129, 1000, 4096}) {
    CAPTURE(n);
    const std::vector<std::uint8_t> data = random_bytes(rng, n);
    CHECK(ours(data.data(), n) == chunk_digest(data.data(), n));
  }
}

TEST_CASE("sha256: the host build equals OpenSSL's on random sizes up to 4 MiB") {
  std::mt19937_64 rng(20261202);
  std::uniform_int_distribution<std::size_t> size(0, 4u << 20);
  for (int i = 0; i < 24; ++i) {
    const std::size_t n = size(rng);
    CAPTURE(n);
    const std::vector<std::uint8_t> data = random_bytes(rng, n);
    CHECK(ours(data.data(), n) == chunk_digest(data.data(), n));
  }
}

TEST_CASE("sha256: any alignment of the bytes gives the same digest") {
  std::mt19937_64 rng(7);
  const std::vector<std::uint8_t> data = random_bytes(rng, 4096 + 8);
  const Digest expect = chunk_digest(data.data() + 8, 4096);
  for (std::size_t shift = 0; shift < 8; ++shift) {
    CAPTURE(shift);
    std::vector<std::uint8_t> moved(4096 + 8);
    std::copy(data.begin() + 8, data.end(), moved.begin() + static_cast<std::ptrdiff_t>(shift));
    CHECK(ours(moved.data() + shift, 4096) == expect);
  }
}
