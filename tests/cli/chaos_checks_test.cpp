// The chaos harness's checks on a run folder (src/bench/chaos.cpp): a run that timed out leaves
// null where a role never reported, and the checks still give their verdict instead of throwing.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "bench/chaos.hpp"

namespace fs = std::filesystem;

namespace {

// A run folder holding `summary` as its summary.json.
struct RunDir {
  fs::path dir;
  explicit RunDir(const std::string& summary) {
    dir = fs::temp_directory_path() /
          ("sluice-chaos-checks-" + std::to_string(reinterpret_cast<std::uintptr_t>(this)));
    fs::create_directories(dir);
    std::ofstream(dir / "summary.json") << summary;
  }
  ~RunDir() { fs::remove_all(dir); }
};

}  // namespace

TEST_CASE("chaos checks: a timed-out run with null roles gives a verdict, not an exception") {
  RunDir run(R"({"outcome": "timeout", "wall_s": 60.5, "actor": null, "manager": null,
                 "restarts": {"rollout-2": null, "manager": {"role": "rollout-manager",
                 "kills": 1, "restarts": 1}}, "watch": null})");
  nlohmann::json out;
  REQUIRE_NOTHROW(out = sluice::cli::chaos_checks(run.dir.string(), 960));
  CHECK(out["completed"] == false);
  CHECK(out["outcome"] == "timeout");
  CHECK(out["lost"] == 960);  // nothing was consumed
  CHECK(out["roles"]["rollout-manager"]["kills"] == 1);
  CHECK(out["wall_s"].get<double>() == doctest::Approx(60.5));
}

TEST_CASE("chaos checks: a field of another type counts as missing") {
  RunDir run(R"({"outcome": "ok", "actor": {"accepted_ids": ["p0/0", "p0/1", "p0/1"],
                 "trained_ids": null, "duplicates": "many"},
                 "manager": {"done": true, "rollouts": [null, {"stats": {"checksum_failures": 2}}]}})");
  nlohmann::json out = sluice::cli::chaos_checks(run.dir.string(), 2);
  CHECK(out["completed"] == true);
  CHECK(out["consumed"] == 2);
  CHECK(out["consumed_twice"] == 1);
  CHECK(out["lost"] == 0);
  CHECK(out["chunks_refused_by_verification"] == 2);
}

TEST_CASE(
    "chaos checks: a job that ended while its manager was down completes if nothing is lost") {
  // The manager was killed near the end: the actor consumed everything and the job ended before
  // the manager came back, so there is no manager status.
  RunDir run(R"({"outcome": "ok", "actor": {"accepted_ids": ["p0/0", "p0/1"],
                 "trained_ids": ["p0/0", "p0/1"]}, "manager": null})");
  nlohmann::json out = sluice::cli::chaos_checks(run.dir.string(), 2);
  CHECK(out["completed"] == true);
  CHECK(out["lost"] == 0);
  // One short, or one twice: not complete.
  RunDir short_run(R"({"outcome": "ok", "actor": {"accepted_ids": ["p0/0", "p0/0"]}})");
  nlohmann::json bad = sluice::cli::chaos_checks(short_run.dir.string(), 2);
  CHECK(bad["completed"] == false);
}
