#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "analysis/compare.hpp"

using sluice::cli::compare_evals;
using sluice::cli::format_comparison;
using sluice::cli::read_evals;
using sluice::core::Code;
namespace fs = std::filesystem;

namespace {

// A run folder with the given metrics.jsonl (and summary.json when `mode` is not empty).
struct FakeRun {
  fs::path path;
  FakeRun(const std::string& name, const std::string& metrics, const std::string& mode = "") {
    path = fs::temp_directory_path() /
           ("sluice-compare-test-" + std::to_string(getpid()) + "-" + name);
    fs::remove_all(path);
    fs::create_directories(path);
    std::ofstream(path / "metrics.jsonl") << metrics;
    if (!mode.empty()) std::ofstream(path / "summary.json") << "{\"mode\": \"" << mode << "\"}";
  }
  ~FakeRun() { fs::remove_all(path); }
};

}  // namespace

TEST_CASE("compare pairs two runs' evaluations by trained samples") {
  // Sync is evaluated at 0, 128 and 256 samples; sluice at 0, 128, 256 and 384. Step lines and
  // a malformed line are ignored.
  FakeRun sync("sync",
               "{\"t\":0.5,\"accuracy\":0.30,\"samples\":0,\"step\":0}\n"
               "{\"t\":1.0,\"reward_mean\":0.2,\"samples\":128,\"step\":1}\n"
               "not json\n"
               "{\"t\":9.0,\"accuracy\":0.50,\"samples\":128,\"step\":1}\n"
               "{\"t\":20.0,\"accuracy\":0.55,\"samples\":256,\"step\":2}\n",
               "sync");
  FakeRun fast("sluice",
               "{\"t\":0.4,\"accuracy\":0.30,\"samples\":0}\n"
               "{\"t\":6.0,\"accuracy\":0.53,\"samples\":128}\n"
               "{\"t\":12.0,\"accuracy\":0.52,\"samples\":256}\n"
               "{\"t\":18.0,\"accuracy\":0.60,\"samples\":384}\n",
               "sluice");
  auto a = read_evals(sync.path.string());
  auto b = read_evals(fast.path.string());
  REQUIRE(a.is_ok());
  REQUIRE(b.is_ok());
  CHECK(a->label == "sync");
  CHECK(a->points.size() == 3);
  auto c = compare_evals(*a, *b);
  REQUIRE(c.is_ok());
  REQUIRE(c->rows.size() == 3);  // 384 was evaluated in one run only
  CHECK(c->rows[1].samples == 128);
  CHECK(c->rows[2].a.t == doctest::Approx(20.0));
  CHECK(c->rows[2].b.t == doctest::Approx(12.0));
  CHECK(c->max_gap_points == doctest::Approx(3.0));  // 50% against 53% at 128 samples

  const std::string text = format_comparison(*c, 5.0);
  CHECK(text.find("comparable: within 5.0") != std::string::npos);
  CHECK(text.find("sluice got there sooner") != std::string::npos);
  CHECK(text.find("NOT within") == std::string::npos);
  // A tighter bound turns the verdict.
  CHECK(format_comparison(*c, 2.0).find("NOT within 2.0") != std::string::npos);
}

TEST_CASE("compare refuses runs it cannot pair, with a clear error") {
  FakeRun none("none", "{\"t\":1.0,\"reward_mean\":0.2,\"samples\":128}\n");
  auto r = read_evals(none.path.string());
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message().find("no evaluation") != std::string::npos);

  auto missing = read_evals((none.path / "nowhere").string());
  REQUIRE_FALSE(missing.is_ok());
  CHECK(missing.status().code() == Code::kNotFound);

  FakeRun x("x", "{\"t\":1,\"accuracy\":0.1,\"samples\":64}\n");
  FakeRun y("y", "{\"t\":1,\"accuracy\":0.1,\"samples\":128}\n");
  auto c = compare_evals(*read_evals(x.path.string()), *read_evals(y.path.string()));
  REQUIRE_FALSE(c.is_ok());
  CHECK(c.status().message().find("never evaluated at the same number") != std::string::npos);
  CHECK(read_evals(x.path.string())->label.find("sluice-compare-test-") == 0);  // no summary
}

TEST_CASE("the accuracy by number of terms pairs the warm start's and the end's evaluations") {
  // 3 terms is evaluated only at the end: left out. 2 terms: 10 of 20, then 19 of 20.
  const std::string table = sluice::cli::format_by_terms("[[2, 20, 10], [4, 8, 0]]",
                                                         "[[2, 20, 19], [3, 5, 5], [4, 8, 2]]");
  CHECK(table.find("held-out accuracy by number of terms") == 0);
  CHECK(table.find("      2       20       50.0%    95.0%\n") != std::string::npos);
  CHECK(table.find("      4        8        0.0%    25.0%\n") != std::string::npos);
  CHECK(table.find("      3") == std::string::npos);
  // Missing (a policy without term counts) or malformed: nothing printed.
  CHECK(sluice::cli::format_by_terms("null", "[[2, 20, 19]]").empty());
  CHECK(sluice::cli::format_by_terms("[[2, 20, 10]]", "[[2, 20]]").empty());
  CHECK(sluice::cli::format_by_terms("[[2, 20, 10]]", "[[2, 20, 21]]").empty());
  CHECK(sluice::cli::format_by_terms("[[2, 0, 0]]", "[[2, 20, 1]]").empty());
}
