#include <doctest/doctest.h>

#include <vector>

#include "core/manifest.hpp"

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
