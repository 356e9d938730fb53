#include "bench/bench_util.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <system_error>

namespace sluice::cli {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

core::Result<std::unique_ptr<BenchKeys>> BenchKeys::make(
    const std::string& tag, const std::vector<std::pair<std::string, std::string>>& others) {
  std::vector<std::pair<std::string, std::string>> identities{
      {"weightstore", core::kRoleWeightstore}, {"actor", core::kRoleActor}};
  identities.insert(identities.end(), others.begin(), others.end());
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("sluice-" + tag + "-keys-" + std::to_string(::getpid()));
  std::unique_ptr<BenchKeys> keys(new BenchKeys(dir.string()));
  SLUICE_TRY(core::make_job_keys(keys->dir_, identities));
  return keys;
}

BenchKeys::~BenchKeys() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

core::SecurityConfig BenchKeys::security(const std::string& identity) const {
  core::SecurityConfig sc;
  sc.key_file = core::key_file_path(dir_, identity);
  sc.members_file = core::members_file_path(dir_);
  return sc;
}

std::vector<std::string> BenchKeys::store_sets() const {
  return {"--set", "store.security.key_file=" + core::key_file_path(dir_, "weightstore"), "--set",
          "store.security.members_file=" + core::members_file_path(dir_)};
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
