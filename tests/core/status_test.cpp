#include <doctest/doctest.h>

#include <memory>

#include "core/status.hpp"

using namespace sluice::core;

namespace {
Result<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("value must be positive, got " + std::to_string(v));
  return v;
}
Result<int> doubled(int v) {
  SLUICE_ASSIGN_OR_RETURN(int x, parse_positive(v));
  return 2 * x;
}
Status check_both(int a, int b) {
  SLUICE_TRY(parse_positive(a));
  SLUICE_TRY(parse_positive(b));
  return {};
}
}  // namespace

TEST_SUITE("core.status") {
  TEST_CASE("ok status and error status") {
    Status ok;
    CHECK(ok.is_ok());
    CHECK(ok.to_string() == "ok");
    Status t = timeout_error("request 'x' timed out");
    CHECK_FALSE(t.is_ok());
    CHECK(t.code() == Code::kTimeout);
    CHECK(t.to_string() == "timeout: request 'x' timed out");
    CHECK(t.with_context("relay 3").message() == "relay 3: request 'x' timed out");
  }

  TEST_CASE("result carries a value or the error, and the macros propagate") {
    CHECK(doubled(4).value() == 8);
    auto bad = doubled(-1);
    REQUIRE_FALSE(bad.is_ok());
    CHECK(bad.status().code() == Code::kInvalidArgument);
    CHECK(bad.status().message() == "value must be positive, got -1");
    CHECK(check_both(1, 2).is_ok());
    CHECK(check_both(1, 0).message() == "value must be positive, got 0");
  }

  TEST_CASE("result of a move-only type") {
    Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
    REQUIRE(r.is_ok());
    auto p = std::move(r).value();
    CHECK(*p == 7);
  }

  TEST_CASE("a result built from an ok status is an internal error, not a silent success") {
    Result<int> r{Status()};
    CHECK_FALSE(r.is_ok());
    CHECK(r.status().code() == Code::kInternal);
  }
}
