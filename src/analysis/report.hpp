// The job's report: one self-contained HTML page drawn from a run folder's metrics.jsonl (and
// summary.json when present), for a person to open in a browser after `sluice run`.
//
// Input, one JSON object per line of RUN_DIR/metrics.jsonl (the actor writes one after every
// training step; any field but "t" may be missing, and a missing field is simply no point):
//   {"t": seconds since start, "step": n, "version": v, "reward_mean": x, "accuracy": x,
//    "tokens_per_s": x, "staleness_mean": x, "weight_stall_frac": x, "loss": x, "mode": "..."}
// A line is malformed when it is not a JSON object, has no finite number "t", or holds a value of
// the wrong type for one of the fields above (null counts as missing). Malformed lines are skipped
// and counted; the page says how many and which. Blank lines are ignored.
//
// Output, RUN_DIR/report.html: with a summary.json, a headline first (held-out accuracy gain,
// throughput, weight stall, whether exactly-once held, and a bar of where the rollouts' slot time
// went, from the manager's free_slot_s); then four inline SVG plots over t (reward, held-out
// accuracy, throughput in tokens/s, staleness), each with axes, tick labels and a title, sharing
// one time axis; then the scalar figures of summary.json as a table, folded in <details>.
// Exactly-once counts the job's trajectories from RUN_DIR/job.json when there is one. The page
// loads nothing: no scripts, fonts, images or network references. All text taken from the inputs
// (the title included) is escaped.
//
// Thread safety: a free function without shared state; calls for different folders may run
// concurrently.
#pragma once

#include <string>
#include <string_view>

#include "core/status.hpp"

namespace sluice::cli {

// Reads RUN_DIR/metrics.jsonl (and RUN_DIR/summary.json if it exists) and writes
// RUN_DIR/report.html, replacing an older one atomically. Errors: kNotFound when metrics.jsonl
// is missing; kInvalidArgument when it holds no usable line (empty, or every line malformed);
// kInternal when it cannot be read or the page cannot be written. A summary.json that is not a
// JSON object is not an error: the page says so and shows the plots without the table.
// Text made safe inside HTML elements and attribute values (& < > " ').
std::string escape_html(std::string_view s);

core::Status write_report(const std::string& run_dir, const std::string& title);

}  // namespace sluice::cli
