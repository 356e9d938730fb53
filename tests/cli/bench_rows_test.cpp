// `sluice simulate --validate` reads the rows `bench e2e --json` prints (src/bench/simulate.hpp):
// the bench's closing exactly-once line is no row, and a failed exactly-once check stops the
// validation rather than comparing against figures of a run that lost work.
#include <doctest/doctest.h>

#include <string>

#include "bench/simulate.hpp"

using sluice::cli::parse_bench_e2e_rows;

TEST_CASE("bench rows: the exactly-once summary line is read, not taken for a mode") {
  const std::string out =
      "progress text\n"
      R"({"mode":"sync","tokens_per_s":100.0})"
      "\n"
      R"({"mode":"sluice","tokens_per_s":300.0})"
      "\n"
      R"({"exactly_once_failed":0,"runs":6})"
      "\n";
  auto rows = parse_bench_e2e_rows(out, "a run");
  REQUIRE_MESSAGE(rows.is_ok(), rows.status().to_string());
  CHECK(rows->size() == 2);
  CHECK(rows->at("sluice").at("tokens_per_s") == 300.0);
}

TEST_CASE("bench rows: a failed exactly-once check is an error naming it") {
  const std::string out = R"({"mode":"sync","tokens_per_s":100.0})"
                          "\n"
                          R"({"exactly_once_failed":1,"runs":6})";
  auto rows = parse_bench_e2e_rows(out, "a run");
  REQUIRE_FALSE(rows.is_ok());
  CHECK(rows.status().message().find("exactly-once check failed in 1 of 6 runs") !=
        std::string::npos);
}

TEST_CASE("bench rows: a line that is neither is still refused") {
  auto rows = parse_bench_e2e_rows(R"({"speed": 3})", "a run");
  REQUIRE_FALSE(rows.is_ok());
  CHECK(rows.status().message().find("not a bench e2e --json line") != std::string::npos);
}
