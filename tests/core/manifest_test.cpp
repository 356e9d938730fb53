#include <doctest/doctest.h>

#include <fmt/format.h>

#include <vector>

#include "../support/job_keys.hpp"
#include "core/checksum.hpp"
#include "format/manifest.hpp"

using namespace sluice::core;

namespace {
Manifest two_tensors() {
  std::vector<std::uint8_t> bytes(24, 7);
  std::vector<TensorSpec> t = {{"a", "F32", {2, 2}, 0, 16}, {"b", "I16", {4}, 16, 8}};
  return make_manifest("m", 1, t, bytes.data(), bytes.size(), 10).value();
}
}  // namespace

TEST_SUITE("core.manifest") {
  TEST_CASE("a manifest round-trips through JSON") {
    Manifest m = two_tensors();
    CHECK(m.chunk_count() == 3);
    CHECK(m.checksums.size() == 3);
    REQUIRE(m.digests.size() == 3);
    // The last chunk is the 4 bytes from offset 20: its digest is theirs.
    std::vector<std::uint8_t> tail(4, 7);
    CHECK(m.digests[2] == chunk_digest(tail.data(), tail.size()));
    CHECK(m.to_json()["digests"][2] == digest_hex(m.digests[2]));
    auto back = Manifest::from_json(m.to_json());
    REQUIRE(back.is_ok());
    CHECK(back->to_json() == m.to_json());
    CHECK(m.layout().chunk_size(2) == 4);
  }

  TEST_CASE("a wrong manifest gets a clear error") {
    Manifest m = two_tensors();
    SUBCASE("overlapping tensors") {
      m.tensors[1].offset = 12;
      CHECK(m.validate().message().find("tensor 'b' at offset 12 overlaps") != std::string::npos);
    }
    SUBCASE("a gap") {
      m.tensors[1].offset = 20;
      m.total_bytes = 28;
      CHECK(m.validate().message().find("leaves a gap") != std::string::npos);
    }
    SUBCASE("bytes that do not match shape and dtype") {
      m.tensors[0].bytes = 12;
      CHECK(m.validate().message().find("tensor 'a' has 12 bytes, its shape and dtype need 16") !=
            std::string::npos);
    }
    SUBCASE("sizes that do not add up to the total") {
      m.total_bytes = 30;
      CHECK(m.validate().message().find("tensors add up to 24 bytes, total_bytes says 30") !=
            std::string::npos);
    }
    SUBCASE("an unknown dtype") {
      m.tensors[1].dtype = "Q3";
      CHECK(m.validate().message().find("unknown dtype 'Q3'") != std::string::npos);
    }
    SUBCASE("a duplicate name") {
      m.tensors[1].name = "a";
      CHECK(m.validate().message().find("appears twice") != std::string::npos);
    }
    SUBCASE("missing checksums") {
      m.checksums.pop_back();
      CHECK(m.validate().message().find("2 checksums for 3 chunks") != std::string::npos);
    }
    SUBCASE("JSON of the wrong shape") {
      auto j = m.to_json();
      j["tensors"][0]["shape"] = "big";
      CHECK(Manifest::from_json(j).status().message().find("'shape'") != std::string::npos);
    }
  }
}

TEST_SUITE("core.manifest.signature") {
  TEST_CASE("an actor's signature covers the model, the version and the whole manifest") {
    const SignKeyPair actor = make_sign_key_pair().value();
    const SignKeyPair relay = make_sign_key_pair().value();
    Manifest m = two_tensors();
    REQUIRE(sign_manifest(m, actor).is_ok());
    CHECK(m.signature.rfind(kSignaturePrefix, 0) == 0);
    CHECK(check_signature(m, {actor.public_key}).is_ok());
    // Any one of the signers will do (a job could list several actors).
    CHECK(check_signature(m, {relay.public_key, actor.public_key}).is_ok());

    // The signature travels with the manifest's JSON and still verifies after it.
    auto back = Manifest::from_json(m.to_json());
    REQUIRE(back.is_ok());
    CHECK(back->signature == m.signature);
    CHECK(check_signature(*back, {actor.public_key}).is_ok());

    // Each thing a reader trusts is covered: changed, the signature no longer verifies.
    auto refused = [&](const Manifest& changed) {
      Status s = check_signature(changed, {actor.public_key});
      CHECK(s.code() == Code::kPermissionDenied);
      CHECK(s.message().find("not an actor's signature") != std::string::npos);
    };
    Manifest c = m;
    c.model = "other";
    refused(c);
    c = m;
    c.version = 2;
    refused(c);
    c = m;
    c.checksums[2] ^= 1;
    refused(c);
    // Every chunk digest, one bit of any of them, and all of them together.
    for (std::size_t i = 0; i < m.digests.size(); ++i) {
      c = m;
      c.digests[i].bytes[31] ^= 1;
      refused(c);
    }
    c = m;
    c.digests.clear();
    refused(c);
    c = m;
    c.chunk_bytes = 12;
    refused(c);
    c = m;
    c.tensors[0].name = "z";
    refused(c);
    c = m;
    c.tensors[1].dtype = "U16";
    refused(c);
    c = m;
    c.tensors[0].shape = {4, 1};
    refused(c);
    c = m;
    c.tensors[0].shape = {2, 2, 1};
    refused(c);
    // The same fields under another key are not the actor's.
    c = m;
    REQUIRE(sign_manifest(c, relay).is_ok());
    refused(c);
  }

  TEST_CASE("unsigned, malformed and other-scheme signatures are refused with a reason") {
    const SignKeyPair actor = make_sign_key_pair().value();
    Manifest m = two_tensors();
    Status s = check_signature(m, {actor.public_key});
    CHECK(s.code() == Code::kPermissionDenied);
    CHECK(s.message().find("m@1 is not signed") != std::string::npos);
    // In plain mode nothing is checked.
    CHECK(check_version_signature(m, Security::plain()).is_ok());

    REQUIRE(sign_manifest(m, actor).is_ok());
    auto j = m.to_json();
    std::string upper = m.signature;
    for (auto& ch : upper)
      if (ch >= 'a' && ch <= 'f') ch = static_cast<char>(ch - 'a' + 'A');
    for (const std::string& bad :
         {std::string("ed25519:abc"), std::string("rsa:") + m.signature.substr(8), upper}) {
      j["signature"] = bad;
      auto r = Manifest::from_json(j);
      CHECK(r.status().code() == Code::kInvalidArgument);
      CHECK(r.status().message().find("'signature' must be") != std::string::npos);
    }
    j["signature"] = 7;
    CHECK(Manifest::from_json(j).status().message().find("'signature'") != std::string::npos);
    Manifest other = m;
    other.signature = "x25519:" + m.signature.substr(8);
    CHECK(check_signature(other, {actor.public_key}).message().find("unknown scheme") !=
          std::string::npos);
  }

  TEST_CASE("where versions are signed, one without chunk digests is refused, however signed") {
    // A version signed over XXH3 checksums alone (an actor from before digests, or a member
    // that strips them and finds an old signature) does not bind its bytes.
    sluice::testing::JobKeys keys;
    const Security actor = keys.security("actor");
    const Security reader = keys.security("rollout-0");
    Manifest m = two_tensors();
    REQUIRE(sign_manifest(m, actor.sign).is_ok());
    CHECK(check_version_signature(m, reader).is_ok());
    Manifest old = m;
    old.digests.clear();
    REQUIRE(sign_manifest(old, actor.sign).is_ok());  // really the actor's signature
    CHECK(check_signature(old, reader.version_signers()).is_ok());
    Status s = check_version_signature(old, reader);
    CHECK(s.code() == Code::kPermissionDenied);
    CHECK(s.message().find("m@1 has no chunk digests") != std::string::npos);
    // Plain mode checks nothing.
    CHECK(check_version_signature(old, Security::plain()).is_ok());
  }

  TEST_CASE("digests in JSON: one per checksum, each sha256: and 64 lowercase hex characters") {
    Manifest m = two_tensors();
    const std::string good = digest_hex(m.digests[0]);
    CHECK(good.rfind("sha256:", 0) == 0);
    CHECK(good.size() == 7 + 64);
    auto parsed = parse_digest(good, "d");
    REQUIRE(parsed.is_ok());
    CHECK(*parsed == m.digests[0]);
    std::string upper = good;
    for (auto& ch : upper)
      if (ch >= 'a' && ch <= 'f') ch = static_cast<char>(ch - 'a' + 'A');
    const std::vector<std::string> bad = {good.substr(0, good.size() - 1), good + "0",
                                          "sha512:" + good.substr(7), "xxh3:" + good.substr(7),
                                          upper.find_first_of("ABCDEF") != std::string::npos
                                              ? upper
                                              : good.substr(0, 7) + std::string(63, '0') + "g"};
    for (const auto& b : bad) {
      CAPTURE(b);
      auto j = m.to_json();
      j["digests"][1] = b;
      auto r = Manifest::from_json(j);
      CHECK(r.status().code() == Code::kInvalidArgument);
      CHECK(r.status().message().find("digest") != std::string::npos);
    }
    auto j = m.to_json();
    j["digests"].erase(j["digests"].size() - 1);
    CHECK(Manifest::from_json(j).status().message().find("one digest per checksum") !=
          std::string::npos);
    j = m.to_json();
    j["digests"][0] = 5;
    CHECK(Manifest::from_json(j).status().message().find("not a string") != std::string::npos);
    // Digests that do not match the chunk count are refused by validate() too.
    Manifest short_m = m;
    short_m.digests.pop_back();
    CHECK(short_m.validate().message().find("2 digests for 3 chunks") != std::string::npos);
  }

  TEST_CASE("the signed form is fixed: known bytes and a known signature for a known manifest") {
    // A change to this form would make every signature of an older actor fail: it is pinned
    // here (tests/fuzz/corpus/fuzz_signed_manifest/signed.json holds the same manifest, signed).
    std::vector<TensorSpec> t = {{"w", "F32", {2, 4}, 0, 32}, {"b", "I64", {1}, 32, 8}};
    Manifest m;
    m.model = "policy";
    m.version = 3;
    m.tensors = t;
    m.total_bytes = 40;
    m.chunk_bytes = 16;
    m.checksums = {11, 22, 33};
    REQUIRE(m.validate().is_ok());
    std::string hex;
    for (unsigned char c : m.signed_bytes())
      hex += fmt::format("{:02x}", c);
    CHECK(hex ==
          "736c756963652e6d616e69666573742e76310600000000000000706f6c6963790300000000000000"
          "28000000000000001000000000000000020000000000000001000000000000007703000000000000"
          "00463332020000000000000002000000000000000400000000000000000000000000000020000000"
          "00000000010000000000000062030000000000000049363401000000000000000100000000000000"
          "2000000000000000080000000000000003000000000000000b000000000000001600000000000000"
          "2100000000000000");
    std::string seed;
    for (int i = 0; i < 32; ++i)
      seed += "5a";
    REQUIRE(sign_manifest(m, sign_key_pair_from_seed(seed).value()).is_ok());
    CHECK(m.signature ==
          "ed25519:f8956d5fcc360f87ac5a95c2a6066e75957e0d846e30ac38f5edc59afd290d067aee10c8"
          "c357cb61541692fa164013fd968cc82609f932ca3e9b0b2cd99c4006");
  }

  TEST_CASE("the signed bytes are one canonical form: no two manifests share them") {
    Manifest m = two_tensors();
    // A name boundary moved between two strings would read the same without length prefixes.
    Manifest a = m, b = m;
    a.model = "ab";
    a.tensors[0].name = "c";
    b.model = "a";
    b.tensors[0].name = "bc";
    CHECK(a.signed_bytes() != b.signed_bytes());
    Manifest s1 = m, s2 = m;
    s1.tensors[0].shape = {2, 2};
    s2.tensors[0].shape = {2, 2, 1};
    CHECK(s1.signed_bytes() != s2.signed_bytes());
    // The signature itself is not part of it.
    Manifest signed_m = m;
    REQUIRE(sign_manifest(signed_m, make_sign_key_pair().value()).is_ok());
    CHECK(signed_m.signed_bytes() == m.signed_bytes());
  }
}
