// `sluice compare RUN_A RUN_B`: two run folders of the same job (e.g. one in sync mode, one in
// sluice mode) side by side at equal numbers of trained samples: held-out accuracy and the time
// each run took to get there.
//
// Input: each folder's metrics.jsonl. The evaluation lines are the ones with "accuracy", "samples"
// (trained samples so far) and "t" (seconds since the actor began training, after its warm
// start); other lines are ignored, and
// so is a line that is not a JSON object or lacks one of those numbers. A folder's label is the
// "mode" of its summary.json when there is one, otherwise the folder's name.
//
// What it reports: one row per sample count evaluated in both runs; the largest accuracy gap over
// those rows; and, at the last sample count both reached, each run's time, so "who got there
// sooner" is read at an equal amount of training.
//
// Thread safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace sluice::cli {

struct EvalPoint {
  std::uint64_t samples = 0;
  double t = 0.0;
  double accuracy = 0.0;
};

struct RunEvals {
  std::string label;
  std::vector<EvalPoint> points;  // in file order
};

struct CompareRow {
  std::uint64_t samples = 0;
  EvalPoint a, b;
};

struct Comparison {
  std::string label_a, label_b;
  std::vector<CompareRow> rows;  // sample counts evaluated in both runs, ascending
  double max_gap_points = 0.0;   // largest |accuracy a - accuracy b| over rows, in points
};

// Reads RUN_DIR/metrics.jsonl (and the label from summary.json). kNotFound when metrics.jsonl is
// missing; kInvalidArgument when it holds no evaluation line.
core::Result<RunEvals> read_evals(const std::string& run_dir);

// Pairs the evaluations of two runs by trained samples (the first evaluation at each count).
// kInvalidArgument when the runs share no sample count.
core::Result<Comparison> compare_evals(const RunEvals& a, const RunEvals& b);

// The table and the verdict lines, as `sluice compare` prints them; `within_points` is the gap
// that counts as comparable.
std::string format_comparison(const Comparison& c, double within_points);

// Held-out accuracy by number of terms after the warm start and at the end of one run, as
// `sluice run` prints it: one line per term count evaluated in both, from the actor summary's
// initial_accuracy_by_terms and final_accuracy_by_terms ([terms, prompts, correct] each).
// Empty when either is missing or malformed.
std::string format_by_terms(const std::string& initial_json, const std::string& final_json);

// `sluice compare DIR_A DIR_B`: prints the comparison, or the error on stderr. Returns the
// process exit status (0, or 2 for runs it cannot read or pair).
int run_compare(const std::string& dir_a, const std::string& dir_b, double within_points);

}  // namespace sluice::cli
