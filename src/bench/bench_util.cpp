#include "bench/bench_util.hpp"

#include <fmt/format.h>

namespace sluice::cli {

std::vector<LengthCase> repack_bench_lengths(const rollout::LengthConfig& job,
                                             const std::vector<double>& spreads,
                                             const std::vector<std::string>& files) {
  std::vector<LengthCase> out;
  out.push_back({job.kind == "file"
                     ? "job: file " + job.file
                     : fmt::format("job: lognormal p50 {:g} p99 {:g}", job.median, job.p99),
                 job});
  for (double k : spreads) {
    rollout::LengthConfig l = job;
    l.kind = "lognormal";
    l.file.clear();
    l.median = job.kind == "lognormal" ? job.median : 64.0;
    l.p99 = k * l.median;
    if (job.kind == "lognormal" && l.p99 == job.p99) {
      out.front().name += fmt::format(" (x{:g})", k);  // the job's own: run once
      continue;
    }
    out.push_back({fmt::format("lognormal p50 {:g} p99 {:g} (x{:g})", l.median, l.p99, k), l});
  }
  for (const auto& f : files) {
    rollout::LengthConfig l = job;
    l.kind = "file";
    l.file = f;
    out.push_back({"file " + f, l});
  }
  return out;
}

double ratio(double a, double b) {
  return b > 0 ? a / b : 0.0;
}

}  // namespace sluice::cli
