// The delta codec: a round trip is bit-exact at every change rate, versions of another layout
// are refused, and a damaged blob is refused or rebuilds a chunk that the target's checksums
// catch.
#include <doctest/doctest.h>

#include <cstring>

#include "core/checksum.hpp"
#include "core/delta.hpp"
#include "core/units.hpp"

using namespace sluice;

namespace {

struct Pair {
  std::vector<std::uint8_t> base, target;
  std::uint64_t changed = 0;
};

// fp32 weights, then one synthetic optimizer step over `fraction` of them. `bytes` need not be
// a whole number of elements (the tail is changed too when fraction > 0).
Pair make_pair(std::size_t bytes, double fraction, std::uint64_t seed) {
  Pair p;
  p.base.resize(bytes);
  core::fill_weights_fp32(p.base, seed);
  for (std::size_t i = bytes & ~std::size_t{3}; i < bytes; ++i)
    p.base[i] = static_cast<std::uint8_t>(i);
  p.target = p.base;
  p.changed = core::optimizer_step_fp32(p.target, fraction, seed + 1);
  if (fraction > 0)
    for (std::size_t i = bytes & ~std::size_t{3}; i < bytes; ++i)
      p.target[i] ^= 0x5a;
  return p;
}

std::vector<std::uint8_t> rebuild(const std::vector<std::uint8_t>& blob,
                                  const std::vector<std::uint8_t>& base) {
  std::vector<std::uint8_t> out(base.size(), 0xee);
  auto st = core::apply_delta(blob, base, out);
  REQUIRE_MESSAGE(st.is_ok(), st.to_string());
  return out;
}

}  // namespace

TEST_SUITE("core") {
  TEST_CASE("a delta rebuilds the target bit for bit at 0%, 1%, 3% and 100% change") {
    const std::size_t bytes = (4u << 20) + 3;  // a short last chunk and a 3-byte tail
    const std::uint64_t chunk = 256 * 1024;
    for (double fraction : {0.0, 0.01, 0.03, 1.0}) {
      CAPTURE(fraction);
      Pair p = make_pair(bytes, fraction, 7);
      CHECK((fraction == 0.0) == (p.changed == 0));
      core::DeltaStats stats;
      auto blob = core::encode_delta(p.base, p.target, 4, 5, chunk, {}, &stats);
      REQUIRE_MESSAGE(blob.is_ok(), blob.status().to_string());
      CHECK(stats.changed_words == p.changed);
      CHECK(rebuild(*blob, p.base) == p.target);
      auto view = core::parse_delta(*blob);
      REQUIRE(view.is_ok());
      CHECK(view->header.base_version == 4);
      CHECK(view->header.target_version == 5);
      CHECK(view->header.total_bytes == bytes);
      CHECK(view->chunks.size() == (bytes + chunk - 1) / chunk);
      MESSAGE((fraction * 100) << "% changed: " << blob->size() << " bytes of " << bytes << " ("
                               << stats.sparse_chunks << " sparse, " << stats.xor_chunks << " xor, "
                               << stats.same_chunks << " same chunks)");
      if (fraction == 0.0) CHECK(blob->size() < 1024);
      if (fraction == 0.03) CHECK(blob->size() * 10 < bytes);
    }
  }

  TEST_CASE("the xor form alone also rebuilds the target, and sparse is smaller at 1%") {
    Pair p = make_pair(1u << 20, 0.01, 11);
    core::DeltaOptions xor_only;
    xor_only.sparse = false;
    core::DeltaStats a, b;
    auto x = core::encode_delta(p.base, p.target, 1, 2, 1u << 20, xor_only, &a);
    auto s = core::encode_delta(p.base, p.target, 1, 2, 1u << 20, {}, &b);
    REQUIRE(x.is_ok());
    REQUIRE(s.is_ok());
    CHECK(a.sparse_chunks == 0);
    CHECK(b.sparse_chunks == 1);
    CHECK(s->size() < x->size());
    CHECK(rebuild(*x, p.base) == p.target);
    CHECK(rebuild(*s, p.base) == p.target);
  }

  TEST_CASE("versions of different layouts are refused") {
    std::vector<std::uint8_t> a(1000, 1), b(1004, 1);
    auto r = core::encode_delta(a, b, 1, 2, 256);
    CHECK(r.status().code() == core::Code::kInvalidArgument);
    CHECK(r.status().message().find("one layout") != std::string::npos);
    CHECK(core::encode_delta(a, a, 1, 2, 0).status().code() == core::Code::kInvalidArgument);
    CHECK(core::encode_delta({}, {}, 1, 2, 256).status().code() == core::Code::kInvalidArgument);
    // A delta applied to a base of another size is refused, and nothing is written.
    Pair p = make_pair(4096, 0.5, 3);
    auto blob = core::encode_delta(p.base, p.target, 1, 2, 1024).value();
    std::vector<std::uint8_t> small(4092), out(4092, 9);
    CHECK(core::apply_delta(blob, small, out).code() == core::Code::kInvalidArgument);
    CHECK(out == std::vector<std::uint8_t>(4092, 9));
  }

  TEST_CASE("a malformed delta is refused with a clear error") {
    Pair p = make_pair(64 * 1024, 0.03, 5);
    const auto blob = core::encode_delta(p.base, p.target, 1, 2, 16 * 1024).value();
    std::vector<std::uint8_t> out(p.base.size());
    auto refused = [&](std::vector<std::uint8_t> bad, const char* words) {
      auto v = core::parse_delta(bad);
      core::Status st = v.is_ok() ? core::apply_delta(bad, p.base, out) : v.status();
      CHECK(st.code() == core::Code::kProtocol);
      CHECK_MESSAGE(st.message().find(words) != std::string::npos, st.message());
    };
    refused({blob.begin(), blob.begin() + 20}, "shorter than");
    auto b = blob;
    b[0] = 'X';
    refused(b, "magic");
    b = blob;
    b[8] = 2;  // format version 2
    refused(b, "format version 2");
    b = blob;
    b[48] += 1;  // one chunk too many for the sizes
    refused(b, "chunks for");
    b = blob;
    b.push_back(0);
    refused(b, "after the last payload");
    b = blob;
    b.pop_back();
    refused(b, "runs past the end");
    b = blob;
    b[core::kDeltaHeaderBytes] = 7;  // chunk 0's encoding
    refused(b, "unknown encoding");
    // A chunk entry with a huge chunk count is refused before anything is allocated for it.
    b = blob;
    for (int i = 0; i < 8; ++i)
      b[48 + i] = 0xff;
    refused(b, "chunks for");
  }

  TEST_CASE("a corrupted payload is refused or caught by the target's checksums") {
    Pair p = make_pair(256 * 1024, 0.03, 9);
    const std::uint64_t chunk = 64 * 1024;
    const auto blob = core::encode_delta(p.base, p.target, 1, 2, chunk).value();
    auto view = core::parse_delta(blob).value();
    // Flip one byte in the middle of each chunk's payload in turn: either the chunk is refused,
    // or it rebuilds bytes whose checksum differs from the target's; never a silent success.
    std::size_t refused = 0, caught = 0;
    for (std::uint64_t i = 0; i < view.chunks.size(); ++i) {
      for (std::uint64_t at : {view.chunks[i].offset + view.chunks[i].bytes / 2,
                               view.chunks[i].offset + view.chunks[i].bytes - 1}) {
        auto bad = blob;
        bad[at] ^= 0x10;
        auto v = core::parse_delta(bad).value();  // the framing is intact
        std::vector<std::uint8_t> out(view.chunk_size(i));
        auto base = std::span(p.base).subspan(i * chunk, view.chunk_size(i));
        core::Status st = core::apply_delta_chunk(v, bad, i, base, out);
        if (!st.is_ok()) {
          ++refused;
          continue;
        }
        const auto want = core::chunk_checksum(p.target.data() + i * chunk, out.size());
        CHECK(core::chunk_checksum(out.data(), out.size()) != want);
        ++caught;
      }
    }
    MESSAGE(refused << " corruptions refused, " << caught << " caught by checksums");
    CHECK(refused + caught == 2 * view.chunks.size());
  }
}
