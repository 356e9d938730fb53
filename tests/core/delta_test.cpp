// The delta codec: a round trip is bit-exact at every change rate, versions of another layout
// are refused, and a damaged blob is refused or rebuilds a chunk that the target's checksums
// catch.
#include <doctest/doctest.h>

#include <zstd.h>

#include <cstring>

#include "core/checksum.hpp"
#include "core/units.hpp"
#include "format/bf16.hpp"
#include "format/delta.hpp"

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

// Two consecutive bf16 versions as the actor publishes them: fp32 master weights rounded to bf16,
// then one AdamW-like step (every element moved by about `step`, either way) rounded again. With
// step 5e-6 on weights of standard deviation 0.02, most bf16 values stay bit for bit the same.
Pair make_bf16_pair(std::size_t values, float step, std::uint64_t seed) {
  std::vector<std::uint8_t> master(4 * values);
  core::fill_weights_fp32(master, seed);
  std::span<float> w(reinterpret_cast<float*>(master.data()), values);
  Pair p;
  p.base.resize(2 * values);
  p.target.resize(2 * values);
  REQUIRE(core::round_to_bf16(w, p.base).is_ok());
  std::uint64_t x = seed | 1;
  for (float& v : w) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v += (x & 1) ? step : -step;
  }
  REQUIRE(core::round_to_bf16(w, p.target).is_ok());
  for (std::size_t i = 0; i < values; ++i)
    p.changed += p.base[2 * i] != p.target[2 * i] || p.base[2 * i + 1] != p.target[2 * i + 1];
  return p;
}

// A one-chunk delta of `total` bytes whose chunk 0 is `encoding` with `raw` as its (compressed)
// payload: for forms the encoder would never make.
std::vector<std::uint8_t> hand_made_delta(std::uint64_t total, std::uint32_t encoding,
                                          const std::vector<std::uint8_t>& raw) {
  std::vector<std::uint8_t> frame(ZSTD_compressBound(raw.size()));
  frame.resize(ZSTD_compress(frame.data(), frame.size(), raw.data(), raw.size(), 1));
  std::vector<std::uint8_t> out = {'S', 'L', 'D', 'E', 'L', 'T', 'A', 0};
  auto put = [&out](std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i)
      out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
  };
  put(core::kDeltaFormatVersion, 4), put(0, 4), put(1, 8), put(2, 8), put(total, 8);
  put(total, 8), put(1, 8);  // chunk bytes, chunk count
  put(encoding, 4), put(0, 4), put(frame.size(), 8);
  out.insert(out.end(), frame.begin(), frame.end());
  return out;
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

  TEST_CASE("bf16 versions: a sparse16 delta rebuilds the published version bit for bit") {
    const std::size_t values = 600001;  // 1,200,002 bytes
    Pair p = make_bf16_pair(values, 5e-6f, 21);
    const double changed = static_cast<double>(p.changed) / values;
    CHECK(changed > 0.005);
    CHECK(changed < 0.2);
    // An odd chunk size: every chunk but the first starts mid-value and ends with a tail byte.
    for (std::uint64_t chunk : {std::uint64_t{1} << 20, std::uint64_t{100001}}) {
      CAPTURE(chunk);
      core::DeltaStats with, without;
      core::DeltaOptions no16;
      no16.sparse16 = false;
      auto blob = core::encode_delta(p.base, p.target, 8, 9, chunk, {}, &with);
      auto old = core::encode_delta(p.base, p.target, 8, 9, chunk, no16, &without);
      REQUIRE(blob.is_ok());
      REQUIRE(old.is_ok());
      // Values are counted within chunks: with an odd chunk size they straddle the boundaries.
      if (chunk % 2 == 0) CHECK(with.changed_values16 == p.changed);
      CHECK(with.sparse16_chunks > 0);
      CHECK(without.sparse16_chunks == 0);
      const auto out = rebuild(*blob, p.base);
      CHECK(out == p.target);
      // Chunk by chunk, what a reader checks: the rebuilt chunk's checksum is the target's.
      auto view = core::parse_delta(*blob).value();
      for (std::uint64_t i = 0; i < view.chunks.size(); ++i) {
        const std::uint64_t at = i * chunk, n = view.chunk_size(i);
        CHECK(core::chunk_checksum(out.data() + at, n) ==
              core::chunk_checksum(p.target.data() + at, n));
      }
      CHECK(rebuild(*old, p.base) == p.target);
      MESSAGE((100 * changed) << "% of bf16 values changed: sparse16 " << blob->size()
                              << " bytes, without it " << old->size() << ", full "
                              << p.base.size());
      CHECK(blob->size() < old->size());
      CHECK(blob->size() * 8 < p.base.size());
    }
  }

  TEST_CASE("sparse16 rebuilds any 2-byte change, wrap-around and odd tails included") {
    std::vector<std::uint8_t> base(4099), target;
    for (std::size_t i = 0; i < base.size(); ++i)
      base[i] = static_cast<std::uint8_t>(i * 37);
    target = base;
    // Values moved by +1, -1, across 0xffff -> 0x0000 and by large steps; the tail byte too.
    const std::size_t at[] = {0, 2, 40, 41, 1000, 2048, 4096};
    for (std::size_t k : at)
      target[k] = static_cast<std::uint8_t>(target[k] + 1 + k);
    target[10] = 0xff, target[11] = 0xff, base[10] = 0x00, base[11] = 0x00;
    target[4098] ^= 0x81;
    for (std::uint64_t chunk : {std::uint64_t{4099}, std::uint64_t{1023}, std::uint64_t{2}}) {
      CAPTURE(chunk);
      core::DeltaStats st;
      auto blob = core::encode_delta(base, target, 1, 2, chunk, {}, &st);
      REQUIRE(blob.is_ok());
      CHECK(rebuild(*blob, base) == target);
    }
  }

  TEST_CASE("a delta against a base the reader does not hold is refused, nothing written") {
    Pair p = make_bf16_pair(50000, 5e-6f, 5);
    const auto blob = core::encode_delta(p.base, p.target, 3, 4, 16384).value();
    auto view = core::parse_delta(blob).value();
    // The reader holds version 5, not 3: refused before a byte is rebuilt.
    auto st = core::check_delta_fits(view.header, 5, 4, p.base.size(), 16384);
    CHECK(st.code() == core::Code::kFailedPrecondition);
    CHECK(st.message() == "delta 3 -> 4 is against version 3; this reader holds version 5");
    st = core::check_delta_fits(view.header, 3, 6, p.base.size(), 16384);
    CHECK(st.code() == core::Code::kFailedPrecondition);
    CHECK(st.message().find("not the 6 wanted") != std::string::npos);
    st = core::check_delta_fits(view.header, 3, 4, p.base.size(), 8192);
    CHECK(st.code() == core::Code::kInvalidArgument);
    CHECK(core::check_delta_fits(view.header, 3, 4, p.base.size(), 16384).is_ok());
    // Bytes of another version under the right number (a reader whose copy is not what the
    // delta was made against): the rebuilt chunks fail the target's checksums, none passes.
    Pair other = make_bf16_pair(50000, 5e-6f, 6);
    std::vector<std::uint8_t> out(p.base.size());
    REQUIRE(core::apply_delta(blob, other.base, out).is_ok());
    for (std::uint64_t i = 0; i < view.chunks.size(); ++i) {
      const std::uint64_t at = i * 16384, n = view.chunk_size(i);
      CHECK(core::chunk_checksum(out.data() + at, n) !=
            core::chunk_checksum(p.target.data() + at, n));
    }
  }

  TEST_CASE("a malformed sparse16 payload is refused with a clear error") {
    const std::vector<std::uint8_t> base(64, 7);
    std::vector<std::uint8_t> out(64, 0xee);
    auto refused = [&](const std::vector<std::uint8_t>& raw, const char* words) {
      const auto blob = hand_made_delta(64, 3, raw);
      auto st = core::apply_delta(blob, base, out);
      CHECK(st.code() == core::Code::kProtocol);
      CHECK_MESSAGE(st.message().find(words) != std::string::npos, st.message());
    };
    // count 2, gaps 0 and 1 (values 0 and 2), differences 2 x 2 bytes: well formed.
    const std::vector<std::uint8_t> good = {2, 0, 0, 0, 0, 1, 2, 1, 0, 0};
    REQUIRE(core::apply_delta(hand_made_delta(64, 3, good), base, out).is_ok());
    CHECK(out[0] == 8);  // +1 (zigzag 2)
    CHECK(out[4] == 6);  // -1 (zigzag 1)
    CHECK(out[2] == 7);
    refused({40, 0, 0, 0}, "names 40 changed values of 32");
    refused({1, 0, 0, 0, 32, 2, 0}, "names value 32 of 32");
    refused({1, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 2, 0}, "indices are malformed");
    refused({2, 0, 0, 0, 0, 1, 2, 1, 0}, "3 bytes of differences, not 4");
    refused({1, 0, 0, 0}, "indices are malformed");
    refused({0, 0, 0}, "sparse16 form of 3 bytes does not fit 64 bytes");
    std::vector<std::uint8_t> huge(4 + 7 * 32 + 1, 0);
    refused(huge, "does not fit 64 bytes");
  }
}
