// Resharding on the way, the pure part: a layout maps a version to the byte pieces one rank
// reads, whose assembly equals slicing the full tensors; bad layouts are refused naming the
// tensor; shard checksums travel signed in the manifest; the casts agree with element-by-element
// reference implementations written here, edge values included.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/checksum.hpp"
#include "core/units.hpp"
#include "format/bf16.hpp"
#include "format/manifest.hpp"
#include "format/shard.hpp"

using namespace sluice::core;

namespace {

bool has(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

// A trainer version: "embed" [8, 6] F32 (rows), "wo" [6, 8] F32 (columns), "norm" [6] F32
// (replicated), "ids" [3] I64; cut into 40-byte chunks so that pieces cross chunks.
struct Version {
  std::vector<std::uint8_t> bytes;
  Manifest manifest;
};

Version version(std::uint64_t chunk = 40) {
  std::vector<TensorSpec> t = {{"embed", "F32", {8, 6}, 0, 192},
                               {"wo", "F32", {6, 8}, 192, 192},
                               {"norm", "F32", {6}, 384, 24},
                               {"ids", "I64", {3}, 408, 24}};
  Version v;
  v.bytes.resize(432);
  fill_pseudo_random(v.bytes.data(), v.bytes.size(), 17);
  v.manifest = make_manifest("m", 3, t, v.bytes.data(), v.bytes.size(), chunk).value();
  return v;
}

ShardLayout layout(std::uint32_t rank, std::uint32_t size) {
  ShardLayout l;
  l.tp_rank = rank;
  l.tp_size = size;
  l.splits = {{"embed", Split::kRows}, {"wo", Split::kColumns}};
  l.names = {{"embed", "model.embed_tokens.weight"},
             {"wo", "model.o_proj.weight"},
             {"norm", "model.norm.weight"},
             {"ids", "model.ids"}};
  return l;
}

// The reference slice of a 2-D row-major tensor, element by element.
std::vector<std::uint8_t> slice(const std::uint8_t* t, std::uint64_t rows, std::uint64_t cols,
                                std::uint64_t elem, std::uint64_t r0, std::uint64_t r1,
                                std::uint64_t c0, std::uint64_t c1) {
  std::vector<std::uint8_t> out;
  for (std::uint64_t r = r0; r < r1; ++r)
    for (std::uint64_t c = c0; c < c1; ++c)
      for (std::uint64_t b = 0; b < elem; ++b)
        out.push_back(t[(r * cols + c) * elem + b]);
  (void)rows;
  return out;
}

// Reference fp32 -> bf16: the nearer of the two bf16 neighbours, ties to the even one.
std::uint16_t ref_bf16(float f) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  if (std::isnan(f)) return 0;  // checked separately: any NaN
  const std::uint32_t lo = bits & 0xffff0000u;
  const std::uint32_t hi = lo + 0x10000u;
  auto value = [](std::uint32_t b) {
    // The step past the largest finite bf16 counts as 2^128 (where rounding reaches infinity).
    if ((b & 0x7fffffffu) == 0x7f800000u) return std::copysign(std::ldexp(1.0, 128), 1.0);
    return std::fabs(static_cast<double>(std::bit_cast<float>(b)));
  };
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(f)) return static_cast<std::uint16_t>(bits >> 16);
  const double dl = a - value(lo & 0x7fffffffu), dh = value(hi & 0x7fffffffu) - a;
  if (dl < dh) return static_cast<std::uint16_t>(lo >> 16);
  if (dh < dl) return static_cast<std::uint16_t>(hi >> 16);
  return static_cast<std::uint16_t>(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
}

// The e4m3fn value of bits 0..0x7e, from the format's definition (bias 7, 3 mantissa bits).
double e4m3_value(int b) {
  const int e = (b >> 3) & 15, m = b & 7;
  return e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
}

// Reference float -> e4m3fn: the nearest of all 127 non-negative finite values, ties to the even
// code; 448 and beyond (infinity too) saturate; NaN is 0x7f with the sign.
std::uint8_t ref_fp8(float f) {
  const std::uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f)) return sign | 0x7f;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 448.0) return sign | 0x7e;
  int best = 0;
  for (int b = 1; b <= 0x7e; ++b) {
    const double d = std::fabs(a - e4m3_value(b)), db = std::fabs(a - e4m3_value(best));
    if (d < db || (d == db && (b & 1) == 0)) best = b;
  }
  return sign | static_cast<std::uint8_t>(best);
}

}  // namespace

TEST_SUITE("core.shard") {
  TEST_CASE("every rank of tp 2 and 4 assembles exactly its slice of each tensor") {
    Version v = version();
    for (std::uint32_t tp : {2u, 4u}) {
      std::uint64_t total = 0;
      for (std::uint32_t r = 0; r < tp; ++r) {
        CAPTURE(tp);
        CAPTURE(r);
        auto plan = plan_shard(v.manifest, layout(r, tp));
        REQUIRE_MESSAGE(plan.is_ok(), plan.status().to_string());
        CHECK(plan->splits == "rc--");
        std::vector<std::uint8_t> got(plan->bytes);
        assemble_shard(*plan, v.bytes.data(), got.data());
        std::vector<std::uint8_t> want =
            slice(v.bytes.data(), 8, 6, 4, r * 8 / tp, (r + 1) * 8 / tp, 0, 6);
        auto wo = slice(v.bytes.data() + 192, 6, 8, 4, 0, 6, r * 8 / tp, (r + 1) * 8 / tp);
        want.insert(want.end(), wo.begin(), wo.end());
        want.insert(want.end(), v.bytes.begin() + 384, v.bytes.end());  // replicated
        CHECK(got == want);
        REQUIRE(plan->tensors.size() == 4);
        CHECK(plan->tensors[0].name == "model.embed_tokens.weight");
        CHECK(plan->tensors[0].shape == std::vector<std::uint64_t>{8 / tp, 6});
        CHECK(plan->tensors[1].shape == std::vector<std::uint64_t>{6, 8 / tp});
        CHECK(plan->tensors[2].shape == std::vector<std::uint64_t>{6});
        // No piece crosses a chunk of the version, and together they are the shard's bytes.
        std::uint64_t sum = 0;
        for (const auto& p : plan->pieces) {
          CHECK(p.src_offset / 40 == (p.src_offset + p.bytes - 1) / 40);
          sum += p.bytes;
        }
        CHECK(sum == plan->bytes);
        CHECK(plan->bytes == (192 + 192) / tp + 48);
        total += plan->bytes;
      }
      CHECK(total == 384 + 48 * tp);
    }
  }

  TEST_CASE("a layout that does not fit gets a clear error naming the tensor") {
    Version v = version();
    SUBCASE("a split the size does not divide") {
      auto p = plan_shard(v.manifest, layout(0, 3));
      CHECK(p.status().code() == Code::kInvalidArgument);
      CHECK(has(p.status(), "tensor 'embed' (shape [8, 6]): tp_size 3 does not divide dim 0 (8)"));
      CHECK(has(p.status(), "does not tile"));
    }
    SUBCASE("a columns split of a tensor with one dimension") {
      ShardLayout l = layout(0, 2);
      l.splits["norm"] = Split::kColumns;
      auto p = plan_shard(v.manifest, l);
      CHECK(has(p.status(), "tensor 'norm' (shape [6]) has no dim 1"));
    }
    SUBCASE("a name map that misses a tensor") {
      ShardLayout l = layout(1, 2);
      l.names.erase("norm");
      auto p = plan_shard(v.manifest, l);
      CHECK(p.status().code() == Code::kInvalidArgument);
      CHECK(has(p.status(), "the name map has no entry for tensor 'norm'"));
    }
    SUBCASE("a name map or split naming a tensor the version lacks") {
      ShardLayout l = layout(0, 2);
      l.names["lm_head"] = "lm_head.weight";
      CHECK(has(plan_shard(v.manifest, l).status(), "names tensor 'lm_head'"));
      l = layout(0, 2);
      l.splits["lm_head"] = Split::kRows;
      CHECK(has(plan_shard(v.manifest, l).status(), "split is given for tensor 'lm_head'"));
    }
    SUBCASE("two tensors under one rollout name") {
      ShardLayout l = layout(0, 2);
      l.names["ids"] = "model.norm.weight";
      CHECK(has(plan_shard(v.manifest, l).status(), "two tensors map to the rollout name"));
    }
    SUBCASE("a cast to an unsupported dtype") {
      ShardLayout l = layout(0, 2);
      l.cast = "fp4";
      auto p = plan_shard(v.manifest, l);
      CHECK(p.status().code() == Code::kInvalidArgument);
      CHECK(has(p.status(), "unsupported cast 'fp4'"));
      auto j = ShardLayout::from_json({{"tp_size", 2}, {"cast", "int8"}});
      CHECK(has(j.status(), "unsupported cast 'int8'"));
    }
    SUBCASE("a rank not below the size") {
      CHECK(has(plan_shard(v.manifest, layout(2, 2)).status(), "tp_rank 2 is not below tp_size 2"));
    }
  }

  TEST_CASE("a layout reads from JSON strictly") {
    auto l = ShardLayout::from_json(
        {{"tp_rank", 1},
         {"tp_size", 4},
         {"splits", {{"embed", "rows"}, {"wo", "columns"}, {"norm", "replicated"}}},
         {"names", {{"embed", "e"}}},
         {"cast", "fp8_e4m3"},
         {"cast_block", 32}});
    REQUIRE_MESSAGE(l.is_ok(), l.status().to_string());
    CHECK(l->tp_rank == 1);
    CHECK(l->splits.at("wo") == Split::kColumns);
    CHECK(l->cast_block == 32);
    auto back = ShardLayout::from_json(l->to_json());
    REQUIRE(back.is_ok());
    CHECK(back->to_json() == l->to_json());
    CHECK(has(ShardLayout::from_json({{"tp_sise", 2}}).status(), "unknown key 'tp_sise'"));
    CHECK(has(ShardLayout::from_json({{"splits", {{"w", "diagonal"}}}}).status(),
              "'splits.w' must be \"rows\", \"columns\" or \"replicated\""));
    CHECK(has(ShardLayout::from_json({{"tp_size", -1}}).status(), "'tp_size'"));
  }

  TEST_CASE("shard checksums travel signed in the manifest, and old manifests sign as before") {
    Version v = version();
    // Without digests (a manifest from before them), the signed form is v1, and v2 with shards.
    Manifest legacy = v.manifest;
    legacy.digests.clear();
    CHECK(legacy.signed_bytes().rfind("sluice.manifest.v1", 0) == 0);
    CHECK(v.manifest.signed_bytes().rfind("sluice.manifest.v3", 0) == 0);
    REQUIRE(add_shard_checksums(v.manifest, layout(0, 2), v.bytes.data()).is_ok());
    REQUIRE(add_shard_checksums(v.manifest, layout(0, 4), v.bytes.data()).is_ok());
    REQUIRE(add_shard_checksums(v.manifest, layout(3, 4), v.bytes.data()).is_ok());  // same one
    REQUIRE(v.manifest.shards.size() == 2);
    REQUIRE(v.manifest.validate().is_ok());
    CHECK(v.manifest.signed_bytes().rfind("sluice.manifest.v3", 0) == 0);
    legacy = v.manifest;
    legacy.digests.clear();
    for (auto& sc : legacy.shards)
      sc.digests.clear();
    CHECK(legacy.signed_bytes().rfind("sluice.manifest.v2", 0) == 0);
    // Each rank's checksums and digests are those of its assembled stream.
    for (std::uint32_t r = 0; r < 4; ++r) {
      auto plan = plan_shard(v.manifest, layout(r, 4)).value();
      std::vector<std::uint8_t> s(plan.bytes);
      assemble_shard(plan, v.bytes.data(), s.data());
      const auto* want = declared_checksums(v.manifest, plan);
      REQUIRE(want != nullptr);
      CHECK(*want == stream_checksums(s, 40));
      const auto* digests = declared_digests(v.manifest, plan);
      REQUIRE(digests != nullptr);
      REQUIRE(digests->size() == want->size());
      for (std::size_t k = 0; k < digests->size(); ++k) {
        const std::size_t n = std::min<std::size_t>(40, s.size() - 40 * k);
        CHECK((*digests)[k] == chunk_digest(s.data() + 40 * k, n));
      }
    }
    ShardLayout other = layout(0, 2);
    other.splits["wo"] = Split::kRows;  // not declared
    CHECK(declared_checksums(v.manifest, plan_shard(v.manifest, other).value()) == nullptr);

    auto back = Manifest::from_json(v.manifest.to_json());
    REQUIRE_MESSAGE(back.is_ok(), back.status().to_string());
    CHECK(back->to_json() == v.manifest.to_json());
    CHECK(back->signed_bytes() == v.manifest.signed_bytes());

    // Signed, then a shard checksum changed: the signature no longer verifies.
    auto key = make_sign_key_pair().value();
    REQUIRE(sign_manifest(v.manifest, key).is_ok());
    CHECK(check_signature(v.manifest, {key.public_key}).is_ok());
    Manifest forged = v.manifest;
    forged.shards[0].ranks[1][0] ^= 1;
    CHECK(check_signature(forged, {key.public_key}).code() == Code::kPermissionDenied);
    forged = v.manifest;
    forged.shards[1].digests[3][0].bytes[0] ^= 1;
    CHECK(check_signature(forged, {key.public_key}).code() == Code::kPermissionDenied);
    forged = v.manifest;
    forged.shards[1].digests.clear();
    CHECK(check_signature(forged, {key.public_key}).code() == Code::kPermissionDenied);

    SUBCASE("wrong counts, splits or sizes are refused") {
      Manifest m = v.manifest;
      m.shards[0].ranks[0].pop_back();
      CHECK(has(m.validate(), "rank 0 has"));
      m = v.manifest;
      m.shards[1].splits = "cc--";  // 6 rows of wo... embed has 6 columns, 4 does not divide
      CHECK(has(m.validate(), "does not tile"));
      m = v.manifest;
      m.shards.push_back(m.shards[0]);
      CHECK(has(m.validate(), "declared twice"));
      nlohmann::json j = v.manifest.to_json();
      j["shards"][0]["checksums"] = nlohmann::json::array({nlohmann::json::array()});
      CHECK(has(Manifest::from_json(j).status(), "one array per rank"));
      j = v.manifest.to_json();
      j["shards"][0]["tp_size"] = 1u << 20;
      CHECK(has(Manifest::from_json(j).status(), "'tp_size' must be an integer"));
      m = v.manifest;
      m.shards[0].digests[1].pop_back();
      CHECK(has(m.validate(), "rank 1 has"));
      j = v.manifest.to_json();
      j["shards"][0]["digests"][0][0] = "sha256:00";
      CHECK(has(Manifest::from_json(j).status(), "shard digest"));
      j = v.manifest.to_json();
      j["shards"][0]["digests"].erase(1);
      CHECK(has(Manifest::from_json(j).status(), "'digests' must be one array per rank"));
    }
  }

  TEST_CASE("a host share is a declared coarser shard, and a rank's pieces rebase onto it") {
    Version v = version();
    REQUIRE(add_shard_checksums(v.manifest, layout(0, 2), v.bytes.data()).is_ok());
    REQUIRE(add_shard_checksums(v.manifest, layout(0, 4), v.bytes.data()).is_ok());
    const std::string splits = plan_shard(v.manifest, layout(1, 2)).value().splits;
    const std::string name = share_model("m", 2, 1, splits);
    CHECK(name.rfind("m~tp2.1~", 0) == 0);
    CHECK(is_share_model(name));
    CHECK_FALSE(is_share_model("m"));
    CHECK(share_parent(name) == "m");

    // The share's manifest: rank 1 of tp 2's stream, with the checksums the actor declared.
    ShardLayout coarse_layout = layout(1, 2);
    coarse_layout.names.clear();
    const ShardPlan coarse = plan_shard(v.manifest, coarse_layout).value();
    auto share = share_manifest(v.manifest, name);
    REQUIRE_MESSAGE(share.is_ok(), share.status().to_string());
    CHECK(share->model == name);
    CHECK(share->total_bytes == coarse.bytes);
    CHECK(share->validate().is_ok());
    std::vector<std::uint8_t> held(coarse.bytes);
    assemble_shard(coarse, v.bytes.data(), held.data());
    CHECK(share->checksums == stream_checksums(held, v.manifest.chunk_bytes));
    REQUIRE(share->digests.size() == share->checksums.size());
    CHECK(share->digests[0] ==
          chunk_digest(held.data(), std::min<std::size_t>(held.size(), v.manifest.chunk_bytes)));
    CHECK(share->signature.empty());

    // Ranks 2 and 3 of tp 4 are inside rank 1 of tp 2: read out of the share's stream alone,
    // their shards equal the slices of the whole version, and no piece crosses a share chunk.
    for (std::uint32_t r : {2u, 3u}) {
      const ShardPlan fine = plan_shard(v.manifest, layout(r, 4)).value();
      auto pieces = rebase_pieces(fine, coarse, v.manifest.chunk_bytes);
      REQUIRE_MESSAGE(pieces.is_ok(), pieces.status().to_string());
      std::vector<std::uint8_t> got(fine.bytes, 0), want(fine.bytes);
      for (const auto& p : *pieces) {
        CHECK(p.src_offset / v.manifest.chunk_bytes ==
              (p.src_offset + p.bytes - 1) / v.manifest.chunk_bytes);
        std::memcpy(got.data() + p.dst_offset, held.data() + p.src_offset, p.bytes);
      }
      assemble_shard(fine, v.bytes.data(), want.data());
      CHECK(got == want);
    }
    // Rank 0 of tp 4 lives in the other half: refused, not read wrong.
    auto outside =
        rebase_pieces(plan_shard(v.manifest, layout(0, 4)).value(), coarse, v.manifest.chunk_bytes);
    CHECK(outside.status().code() == Code::kInvalidArgument);
    CHECK(has(outside.status(), "does not hold"));

    // A share of a layout the actor did not declare, or of another model, has no manifest.
    CHECK(share_manifest(v.manifest, share_model("m", 6, 0, splits)).status().code() ==
          Code::kFailedPrecondition);
    CHECK(share_manifest(v.manifest, share_model("other", 2, 1, splits)).status().code() ==
          Code::kInvalidArgument);
    CHECK(share_manifest(v.manifest, "m~tp2.5~0000000000000000").status().code() ==
          Code::kInvalidArgument);
  }

  TEST_CASE("fp32 to bf16 matches the reference, rounding to nearest even, NaN kept") {
    std::vector<float> edge = {0.0f,
                               -0.0f,
                               1.0f,
                               -1.0f,
                               std::numeric_limits<float>::max(),
                               -std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::bit_cast<float>(0x3f808000u),  // a tie, even kept
                               std::bit_cast<float>(0x3f818000u),  // a tie, rounds up to even
                               std::bit_cast<float>(0x3f808001u),
                               std::bit_cast<float>(0x7f7f8000u)};  // ties to infinity
    for (float f : edge) {
      CAPTURE(f);
      CHECK(bf16_from_f32(f) == ref_bf16(f));
    }
    CHECK(bf16_from_f32(std::bit_cast<float>(0x3f808000u)) == 0x3f80);
    CHECK(bf16_from_f32(std::bit_cast<float>(0x3f818000u)) == 0x3f82);
    CHECK(bf16_from_f32(std::numeric_limits<float>::max()) == 0x7f80);  // rounds to infinity
    for (std::uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
      const std::uint16_t b = bf16_from_f32(std::bit_cast<float>(nan));
      CHECK(std::isnan(f32_from_bf16(b)));
      CHECK((b & 0x8000) == ((nan >> 16) & 0x8000));
    }
    // Every upper half with low halves around the rounding point.
    std::mt19937 rng(5);
    for (std::uint32_t hi = 0; hi < 0x10000u; ++hi) {
      for (std::uint32_t lo : {0u, 1u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu,
                               static_cast<std::uint32_t>(rng() & 0xffffu)}) {
        const float f = std::bit_cast<float>((hi << 16) | lo);
        if (std::isnan(f)) continue;
        if (bf16_from_f32(f) != ref_bf16(f)) {
          FAIL_CHECK("bits " << ((hi << 16) | lo));
          return;
        }
      }
    }
  }

  TEST_CASE("bf16 to fp8 e4m3 matches the reference on every bf16 value") {
    for (std::uint32_t b = 0; b < 0x10000u; ++b) {
      const float f = f32_from_bf16(static_cast<std::uint16_t>(b));
      if (fp32_to_fp8_e4m3(f) != ref_fp8(f)) {
        FAIL_CHECK("bf16 bits " << b << " (" << f << ")");
        return;
      }
    }
    CHECK(fp32_to_fp8_e4m3(448.0f) == 0x7e);
    CHECK(fp32_to_fp8_e4m3(1e6f) == 0x7e);  // saturates: e4m3fn has no infinity
    CHECK(fp32_to_fp8_e4m3(-std::numeric_limits<float>::infinity()) == 0xfe);
    CHECK(fp32_to_fp8_e4m3(std::nanf("")) == 0x7f);
    CHECK(fp32_to_fp8_e4m3(std::ldexp(1.0f, -9)) == 0x01);   // smallest subnormal
    CHECK(fp32_to_fp8_e4m3(std::ldexp(1.0f, -10)) == 0x00);  // a tie, to even (zero)
    CHECK(fp32_to_fp8_e4m3(-0.0f) == 0x80);
    for (int b = 0; b < 0x7f; ++b)
      CHECK(fp8_e4m3_to_fp32(static_cast<std::uint8_t>(b)) == static_cast<float>(e4m3_value(b)));
  }

  TEST_CASE("a cast shard equals the reference cast of the reference slice") {
    // F32 "w" [4, 6] (rows) and BF16 "h" [2, 10] (columns), with edge values planted.
    std::vector<std::uint8_t> bytes(96 + 40);
    fill_pseudo_random(bytes.data(), bytes.size(), 9);
    std::vector<float> w(24);
    for (std::size_t i = 0; i < w.size(); ++i)
      w[i] = std::ldexp(static_cast<float>(i) - 11.5f, static_cast<int>(i % 7) - 3);
    w[3] = std::numeric_limits<float>::quiet_NaN();
    w[4] = std::bit_cast<float>(0x3f808000u);
    std::memcpy(bytes.data(), w.data(), 96);
    std::vector<std::uint16_t> h(20);
    for (std::size_t i = 0; i < h.size(); ++i)
      h[i] = bf16_from_f32(std::ldexp(static_cast<float>(i) - 9.0f, static_cast<int>(i % 5)));
    h[6] = bf16_from_f32(std::numeric_limits<float>::infinity());
    h[13] = 0x7fc0;  // NaN
    std::memcpy(bytes.data() + 96, h.data(), 40);
    std::vector<TensorSpec> t = {{"w", "F32", {4, 6}, 0, 96}, {"h", "BF16", {2, 10}, 96, 40}};
    Manifest m = make_manifest("m", 1, t, bytes.data(), bytes.size(), 16).value();

    for (const char* cast : {"bf16", "fp8_e4m3"}) {
      for (std::uint32_t r = 0; r < 2; ++r) {
        CAPTURE(cast);
        CAPTURE(r);
        ShardLayout l;
        l.tp_rank = r;
        l.tp_size = 2;
        l.splits = {{"w", Split::kRows}, {"h", Split::kColumns}};
        l.cast = cast;
        l.cast_block = 4;  // 10 elements: blocks of 4, 4 and 2
        ShardPlan plan = plan_shard(m, l).value();
        std::vector<std::uint8_t> in(plan.bytes);
        assemble_shard(plan, bytes.data(), in.data());
        Manifest out_m = shard_manifest(m, plan, l);
        std::vector<std::uint8_t> out(out_m.total_bytes);
        cast_shard(plan, l, in.data(), out.data(), 8);  // small steps
        // The reference: element by element from the full tensors.
        std::vector<std::uint8_t> want;
        auto put = [&](const void* p, std::size_t n) {
          auto* b = static_cast<const std::uint8_t*>(p);
          want.insert(want.end(), b, b + n);
        };
        std::vector<float> wslice(w.begin() + r * 12, w.begin() + (r + 1) * 12);
        std::vector<std::uint16_t> hslice;
        for (int row = 0; row < 2; ++row)
          for (int c = 0; c < 5; ++c)
            hslice.push_back(h[row * 10 + r * 5 + c]);
        if (std::string(cast) == "bf16") {
          REQUIRE(out_m.tensors.size() == 2);
          CHECK(out_m.tensors[0].dtype == "BF16");
          CHECK(out_m.tensors[1].dtype == "BF16");  // already bf16: as it is
          for (float f : wslice) {
            std::uint16_t b = std::isnan(f) ? bf16_from_f32(f) : ref_bf16(f);
            put(&b, 2);
          }
          put(hslice.data(), 2 * hslice.size());
        } else {
          REQUIRE(out_m.tensors.size() == 3);
          CHECK(out_m.tensors[0].dtype == "F32");  // not bf16: as it is
          CHECK(out_m.tensors[1].dtype == "F8_E4M3");
          CHECK(out_m.tensors[2].name == "h.scale");
          CHECK(out_m.tensors[2].shape == std::vector<std::uint64_t>{3});
          put(wslice.data(), 48);
          std::vector<float> scales;
          for (std::size_t b0 = 0; b0 < hslice.size(); b0 += 4) {
            float amax = 0;
            for (std::size_t i = b0; i < std::min<std::size_t>(b0 + 4, hslice.size()); ++i) {
              float a = std::fabs(f32_from_bf16(hslice[i]));
              if (std::isfinite(a) && a > amax) amax = a;
            }
            const float scale = amax > 0 ? amax / 448.0f : 1.0f;
            scales.push_back(scale);
            for (std::size_t i = b0; i < std::min<std::size_t>(b0 + 4, hslice.size()); ++i) {
              std::uint8_t q = ref_fp8(f32_from_bf16(hslice[i]) / scale);
              put(&q, 1);
            }
          }
          put(scales.data(), 4 * scales.size());
        }
        CHECK(out == want);
      }
    }
  }
}
