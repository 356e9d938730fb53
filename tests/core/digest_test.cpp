// Chunk digests (SHA-256) against chunk checksums (XXH3): a pair of different chunks with the
// same XXH3, built from XXH3's structure, which the digest tells apart, and a reader that refuses
// a served chunk whose bytes are not the ones its digest was signed over.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/checksum.hpp"
#include "core/event_loop.hpp"
#include "core/units.hpp"
#include "wire/transfer.hpp"

using namespace sluice::core;

namespace {

// Two 4 KiB chunks with the same XXH3-64. For inputs over 240 bytes XXH3 adds, per 64-byte stripe
// and 8-byte lane j, the lane's value v to one accumulator and lo32(v ^ s) * hi32(v ^ s) to
// another, s being the secret's word for that stripe and lane. A lane whose low 32 bits equal
// the secret word's makes the product 0 whatever its high bits, so its value reaches the
// accumulators only through the plain sum. Two such lanes that feed the same accumulator (lane 0
// of stripes 0 and 1, against the default secret's words 0xbe4ba423396cfeb8 and
// 0x1cad21f72c81017c) can trade 2^32 between them: the sums, and so the hash, stay the same.
std::vector<std::uint8_t> colliding_chunk(bool second) {
  constexpr std::uint64_t kLane0 = 0x396cfeb8ull;  // low 32 bits of the secret's word 0
  constexpr std::uint64_t kLane1 = 0x2c81017cull;  // low 32 bits of the secret's word 1
  const std::uint64_t a = second ? kLane0 + (1ull << 32) : kLane0;
  const std::uint64_t b = second ? kLane1 - (1ull << 32) : kLane1;
  std::vector<std::uint8_t> out(4096, 0);
  std::memcpy(out.data(), &a, 8);       // little-endian, as XXH3 reads on this machine
  std::memcpy(out.data() + 64, &b, 8);  // the next stripe, lane 0
  return out;
}

struct Pair {
  std::unique_ptr<EventLoop> loop = EventLoop::create().value();
  std::unique_ptr<TransferEngine> holder, reader;
  explicit Pair(const std::string& tls) {
    TransferOptions o;
    o.ucx_config = {{"TLS", tls}, {"NET_DEVICES", "lo"}};
    holder = TransferEngine::create(*loop, o).value();
    reader = TransferEngine::create(*loop, o).value();
  }
};

}  // namespace

TEST_SUITE("core.digest") {
  TEST_CASE("two different chunks with one XXH3 are told apart by their digests") {
    const auto a = colliding_chunk(false), b = colliding_chunk(true);
    REQUIRE(a.size() == b.size());
    CHECK(a != b);
    CHECK(chunk_checksum(a.data(), a.size()) == chunk_checksum(b.data(), b.size()));
    CHECK_FALSE(chunk_digest(a.data(), a.size()) == chunk_digest(b.data(), b.size()));
  }

  TEST_CASE("the digest is SHA-256: known answers") {
    CHECK(digest_hex(chunk_digest("", 0)) ==
          "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(digest_hex(chunk_digest("abc", 3)) ==
          "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  }

  TEST_CASE("copying with sums gives memcpy's bytes and each sum of what was written") {
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{65536 * 4 - 1},
                              std::size_t{65536 * 4}, std::size_t{(3u << 20) + 17}}) {
      CAPTURE(bytes);
      // At least one byte allocated, so that no pointer below is null (memcmp may not be given
      // one even for no bytes); `bytes` of them are copied.
      std::vector<std::uint8_t> src(std::max<std::size_t>(bytes, 1)), dst(bytes + 1, 0);
      fill_pseudo_random(src.data(), bytes, bytes + 1);
      for (SumKind kind : {SumKind::checksum, SumKind::digest, SumKind::both}) {
        ChunkSums s = copy_with_sums(dst.data() + 1, src.data(), bytes, kind);
        CHECK(std::memcmp(dst.data() + 1, src.data(), bytes) == 0);
        CHECK(s.checksum.has_value() == (kind != SumKind::digest));
        CHECK(s.digest.has_value() == (kind != SumKind::checksum));
        if (s.checksum) CHECK(*s.checksum == chunk_checksum(src.data(), bytes));
        if (s.digest) CHECK(*s.digest == chunk_digest(src.data(), bytes));
      }
    }
  }

  TEST_CASE("an empty copy may come as null pointers: the sums of no bytes") {
    // An empty tensor's range: its pointers may be null (UBSan stops on a null memcpy).
    ChunkSums s = copy_with_sums(nullptr, nullptr, 0, SumKind::both);
    REQUIRE(s.checksum.has_value());
    REQUIRE(s.digest.has_value());
    CHECK(*s.checksum == chunk_checksum("", 0));
    CHECK(digest_hex(*s.digest) ==
          "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  }

  TEST_CASE("a source rewritten during a digested copy cannot give a copy that verifies") {
    const std::size_t bytes = 1u << 20;
    static std::vector<std::uint8_t> src;
    src.assign(bytes, 0);
    fill_pseudo_random(src.data(), bytes, 9);
    const Digest before = chunk_digest(src.data(), bytes);
    std::vector<std::uint8_t> dst(bytes);
    // After the first block is read, a writer changes a later block.
    detail::copy_with_checksum_read_hook = [](std::size_t offset) {
      if (offset == 0) src[bytes / 2] ^= 0xff;
    };
    const Digest got = copy_with_digest(dst.data(), src.data(), bytes);
    detail::copy_with_checksum_read_hook = nullptr;
    CHECK(got == chunk_digest(dst.data(), bytes));
    CHECK_FALSE(got == before);
  }

  TEST_CASE("a reader refuses served bytes that are not the signed ones, even with the same XXH3") {
    for (const char* tls : {"tcp", "sm"}) {
      CAPTURE(tls);
      Pair p(tls);
      const auto signed_bytes = colliding_chunk(false);
      const std::uint64_t bytes = signed_bytes.size();
      auto served = p.holder->allocate(bytes).value();
      auto dst = p.reader->allocate(bytes).value();
      ChunkRead c;
      c.bytes = bytes;
      c.checksum = chunk_checksum(signed_bytes.data(), bytes);
      c.digest = chunk_digest(signed_bytes.data(), bytes);
      ReadOptions opt;
      opt.op_timeout = Millis(5000);
      opt.total_timeout = Millis(20000);

      // The honest holder's bytes are read.
      std::memcpy(served->data(), signed_bytes.data(), bytes);
      auto ok = p.reader->read_sync({{"holder", served->descriptor()}}, {c}, *dst, opt);
      REQUIRE_MESSAGE(ok.is_ok(), ok.status().to_string());
      CHECK(std::memcmp(dst->data(), signed_bytes.data(), bytes) == 0);

      // A member serves other bytes with the same XXH3: refused by the digest.
      const auto forged = colliding_chunk(true);
      std::memcpy(served->data(), forged.data(), bytes);
      std::memset(dst->data(), 0, bytes);
      auto refused = p.reader->read_sync({{"forger", served->descriptor()}}, {c}, *dst, opt);
      REQUIRE_FALSE(refused.is_ok());
      CHECK(refused.status().code() == Code::kDataLoss);
      CHECK(refused.status().message().find("forger: digest mismatch") != std::string::npos);

      // One byte changed is refused the same way.
      std::memcpy(served->data(), signed_bytes.data(), bytes);
      served->data()[100] ^= 1;
      auto flipped = p.reader->read_sync({{"forger", served->descriptor()}}, {c}, *dst, opt);
      REQUIRE_FALSE(flipped.is_ok());
      CHECK(flipped.status().message().find("digest mismatch") != std::string::npos);

      // Checked against the checksum alone, the forged chunk would have passed: why the
      // signature covers digests.
      std::memcpy(served->data(), forged.data(), bytes);
      ChunkRead weak = c;
      weak.digest.reset();
      auto passed = p.reader->read_sync({{"forger", served->descriptor()}}, {weak}, *dst, opt);
      REQUIRE_MESSAGE(passed.is_ok(), passed.status().to_string());
      CHECK(std::memcmp(dst->data(), forged.data(), bytes) == 0);
      dst.reset();
      served.reset();
    }
  }
}
