#include "bench/bench_util.hpp"

#include <fmt/format.h>
#include <unistd.h>

namespace sluice::cli {

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "sluice";
  return std::string(buf, static_cast<std::size_t>(n));
}

std::string find_emuhosts(const std::vector<std::string>& environment) {
  for (const auto& e : environment)
    if (e.rfind("SLUICE_EMUHOSTS=", 0) == 0) return e.substr(16);
  std::string exe = self_exe();
  std::string dir = exe.substr(0, exe.rfind('/'));
  for (const char* rel : {"/../scripts/emuhosts.sh", "/../../scripts/emuhosts.sh"}) {
    std::string p = dir + rel;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

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
