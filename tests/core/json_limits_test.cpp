// Bounded JSON parsing: deep nesting and oversized text are refused before a node is built, and
// what fits parses as nlohmann would; a manifest that claims nearly 2^64 bytes does not wrap.
#include <doctest/doctest.h>

#include <string>

#include "core/json_limits.hpp"
#include "format/manifest.hpp"

using namespace sluice;

TEST_SUITE("core.json_limits") {
  TEST_CASE("a 100,000-deep body is refused by depth, at once, and a shallow one parses") {
    std::string deep(100000, '[');
    deep += std::string(100000, ']');
    auto r = core::parse_json_bounded(deep, core::JsonLimits{});
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().message().find("nested deeper than the limit of 64") != std::string::npos);
    CHECK(core::json_depth(deep, 64) == 65);  // stops counting past the bound

    auto ok = core::parse_json_bounded(R"({"a": [1, {"b": "[[[[{{{{"}]})", core::JsonLimits{});
    REQUIRE(ok.is_ok());
    CHECK(ok->at("a").at(1).at("b") == "[[[[{{{{");         // brackets in strings do not nest
    CHECK(core::json_depth(R"({"a": "\"[[["})", 10) == 1);  // nor after an escaped quote

    core::JsonLimits small;
    small.max_bytes = 8;
    auto big = core::parse_json_bounded(R"({"a": 12345})", small);
    REQUIRE_FALSE(big.is_ok());
    CHECK(big.status().message().find("exceeds the limit of 8") != std::string::npos);
    CHECK_FALSE(core::parse_json_bounded("{\"a\": ", core::JsonLimits{}).is_ok());
  }

  TEST_CASE("a manifest claiming nearly 2^64 bytes counts its chunks without wrapping") {
    core::Manifest m;
    // Moved in, not assigned from a literal: GCC 12 with ASan reports a false -Wrestrict on the
    // latter here (and warnings are errors).
    m.model = std::string("policy");
    m.chunk_bytes = 1u << 20;
    m.total_bytes = UINT64_MAX - 5;
    // (total + chunk - 1) / chunk would wrap to a handful of chunks.
    CHECK(m.chunk_count() == UINT64_MAX / (1u << 20) + 1);
    m.tensors.push_back({"w", "U8", {UINT64_MAX - 5}, 0, UINT64_MAX - 5});
    m.checksums = {1, 2, 3};
    auto st = m.validate();
    REQUIRE_FALSE(st.is_ok());
    CHECK(st.message().find("3 checksums for") != std::string::npos);
  }
}
