// `sluice bench crossdc`: the outer command (see bench_crossdc.hpp): sets up the datacenters for
// each design, runs `bench crossdc-run` inside host 0, and prints the figures side by side.
#include "bench/bench_crossdc.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/bench_util.hpp"
#include "bench/harness.hpp"
#include "core/event_loop.hpp"
#include "core/process.hpp"
#include "core/units.hpp"

namespace sluice::cli {

using namespace sluice::core;

namespace {

// All cores at least this busy during a version's spread: the machine, not the links, paced it.
constexpr double kCpuBound = 0.9;
// One design's whole run (its versions one after another) inside the emulated hosts.
constexpr Millis kCrossdcRunTimeout{1800000};
int usage_error(const std::string& what) {
  std::fprintf(stderr, "bench crossdc: %s\n", what.c_str());
  return 2;
}

}  // namespace

std::vector<std::string> crossdc_part_argv(const std::string& exe, const std::string& part,
                                           const BenchCrossdcArgs& a) {
  return {exe,
          "--log-level",
          "warn",
          "bench",
          part,
          "--design",
          a.design,
          "--hosts-per-dc",
          std::to_string(a.hosts_per_dc),
          "--rollouts-per-host",
          std::to_string(a.rollouts_per_host),
          "--poll-ms",
          std::to_string(a.poll_ms),
          "--local-check-ms",
          std::to_string(a.local_check_ms),
          "--wait-ms",
          std::to_string(a.wait_ms),
          "--encryption",
          a.encryption};
}

namespace {

// The usage errors of the outer command's numeric options ("" when there are none).
std::string crossdc_usage_error(const BenchCrossdcArgs& args) {
  if (args.dcs < 1 || args.dcs > 16) return "--dcs must be between 1 and 16";
  if (args.hosts_per_dc < 1 || args.dcs * args.hosts_per_dc < 2 ||
      args.dcs * args.hosts_per_dc > 64) {
    return "--dcs x --hosts-per-dc must be between 2 and 64 hosts";
  }
  if (args.rollouts_per_host < 1 || args.rollouts_per_host > 16)
    return "--rollouts-per-host must be between 1 and 16";
  if (args.versions < 2 || args.versions > 20) return "--versions must be between 2 and 20";
  if (!(args.change_rate > 0.0 && args.change_rate <= 1.0))
    return "--change-rate must be in (0, 1]";
  if (args.poll_ms < 1 || args.poll_ms > 10000) return "--poll-ms must be between 1 and 10000";
  if (args.local_check_ms < 1 || args.local_check_ms > 10000)
    return "--local-check-ms must be between 1 and 10000";
  if (args.relay_follow_ms < 1 || args.relay_follow_ms > 1000)
    return "--relay-follow-ms must be between 1 and 1000";
  if (args.wait_ms > 10000) return "--wait-ms must be at most 10000";
  return "";
}

// The names in a comma-separated list, each once, each one of `known`; "" or what is wrong.
std::string parse_names(const std::string& list, const std::vector<std::string>& known,
                        const std::string& what, std::vector<std::string>& out) {
  std::stringstream ss(list);
  for (std::string n; std::getline(ss, n, ',');) {
    if (std::find(known.begin(), known.end(), n) == known.end()) {
      std::string names;
      for (const auto& k : known)
        names += (names.empty() ? "" : ", ") + k;
      return "unknown " + what + " '" + n + "' (" + names + ")";
    }
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  return "";
}

// One design at one encryption setting: the hosts made, `bench crossdc-run` inside host 0, the
// hosts removed; its rows appended. False when it failed (said on stderr).
bool run_pass(const BenchCrossdcArgs& args, const BenchCrossdcArgs& real, const std::string& emu,
              const std::string& prefix, const std::string& design, const std::string& encryption,
              std::vector<nlohmann::json>& rows) {
  if (!args.json)
    std::fprintf(stderr, "bench crossdc: %s, encryption %s...\n", design.c_str(),
                 encryption.c_str());
  auto up = run_capture({emu, "up", "--dcs", std::to_string(args.dcs), "--hosts-per-dc",
                         std::to_string(args.hosts_per_dc), "--lan-rate", args.lan_rate,
                         "--wan-rate", args.wan_rate, "--prefix", prefix},
                        {}, kHostsUpTimeout);
  if (!up.is_ok()) {
    std::fprintf(stderr, "bench crossdc: %s\n", up.status().to_string().c_str());
    return false;
  }
  BenchCrossdcArgs pass = args;
  pass.design = design;
  pass.encryption = encryption;
  std::vector<std::string> run_argv = in_emulated_host(emu, prefix, 0);
  const std::vector<std::string> part = crossdc_part_argv(self_exe(), "crossdc-run", pass);
  run_argv.insert(run_argv.end(), part.begin(), part.end());
  run_argv.insert(run_argv.end(), {"--dcs",
                                   std::to_string(args.dcs),
                                   "--size",
                                   real.size,
                                   "--versions-dir",
                                   real.versions_dir,
                                   "--first-version",
                                   std::to_string(args.first_version),
                                   "--chunk",
                                   args.chunk,
                                   "--versions",
                                   std::to_string(args.versions),
                                   "--change-rate",
                                   std::to_string(args.change_rate),
                                   "--relay-follow-ms",
                                   std::to_string(args.relay_follow_ms),
                                   "--emuhosts",
                                   emu,
                                   "--prefix",
                                   prefix});
  auto out = run_capture(run_argv, kEmulatedHostUcxEnv, kCrossdcRunTimeout);
  run_capture({emu, "down", "--prefix", prefix}, {}, kHostsDownTimeout).status().ignore();
  if (!out.is_ok()) {
    std::fprintf(stderr, "bench crossdc: %s: %s\n", design.c_str(),
                 out.status().to_string().c_str());
    return false;
  }
  std::size_t got = 0;
  std::istringstream lines(*out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("{\"", 0) != 0) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("version")) continue;
    j["encryption"] = encryption;
    rows.push_back(std::move(j));
    ++got;
  }
  if (got != args.versions) {
    std::fprintf(stderr, "bench crossdc: %s: the run printed %zu of %u versions:\n%s\n",
                 design.c_str(), got, args.versions, out->c_str());
    return false;
  }
  return true;
}

// Per row: WAN bytes in copies of the version, the time against "direct"'s for the same version
// and encryption in this run, and (encrypted rows) clear's time over this row's. True when a
// row was CPU-bound.
bool add_ratios(std::vector<nlohmann::json>& rows) {
  using Key = std::pair<std::uint64_t, std::string>;
  std::map<Key, double> direct_s;
  std::map<std::pair<std::string, std::uint64_t>, double> clear_s;  // (design, version)
  for (const auto& r : rows) {
    const auto v = r["version"].get<std::uint64_t>();
    if (r["design"] == "direct") direct_s[{v, r["encryption"].get<std::string>()}] = r["seconds"];
    if (r["encryption"] == "off") clear_s[{r["design"].get<std::string>(), v}] = r["seconds"];
  }
  bool cpu_bound = false;
  for (auto& r : rows) {
    double bytes = r["bytes"].get<double>();
    nlohmann::json in = nlohmann::json::array(), out = nlohmann::json::array();
    double most = 0;
    for (std::size_t d = 0; d < r["egress"].size(); ++d) {
      double o = r["egress"][d].get<double>() / bytes, i = r["ingress"][d].get<double>() / bytes;
      out.push_back(o);
      in.push_back(i);
      most = std::max({most, o, i});
    }
    r["wan_copies_out"] = out;
    r["wan_copies_in"] = in;
    r["wan_copies_max"] = most;
    const auto v = r["version"].get<std::uint64_t>();
    auto it = direct_s.find({v, r["encryption"].get<std::string>()});
    double s = r["seconds"].get<double>();
    r["speedup_vs_direct"] = nullptr;
    if (it != direct_s.end() && s > 0) r["speedup_vs_direct"] = it->second / s;
    r["encrypted_over_clear"] = nullptr;
    auto cl = clear_s.find({r["design"].get<std::string>(), v});
    if (r["encryption"] != "off" && cl != clear_s.end() && s > 0)
      r["encrypted_over_clear"] = cl->second / s;
    cpu_bound = cpu_bound || r["cpu_busy"].get<double>() >= kCpuBound;
  }
  return cpu_bound;
}

void print_crossdc_table(const BenchCrossdcArgs& args, const std::vector<nlohmann::json>& rows,
                         std::uint64_t size, bool compare, bool cpu_bound) {
  std::printf("%-7s %5s %7s %9s %10s %9s %9s %9s  %s\n", "design", "enc", "version", "seconds",
              "vs direct", "enc/clear", "WAN max", "CPU busy",
              "WAN copies per datacenter (out/in)");
  for (const auto& r : rows) {
    std::string per_dc;
    for (std::size_t d = 0; d < r["wan_copies_out"].size(); ++d) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%sdc%zu %.2f/%.2f", d ? "  " : "", d,
                    r["wan_copies_out"][d].get<double>(), r["wan_copies_in"][d].get<double>());
      per_dc += buf;
    }
    char ratio[32] = "-";
    if (!r["speedup_vs_direct"].is_null())
      std::snprintf(ratio, sizeof ratio, "%.2fx", r["speedup_vs_direct"].get<double>());
    char enc_ratio[32] = "-";
    if (!r["encrypted_over_clear"].is_null())
      std::snprintf(enc_ratio, sizeof enc_ratio, "%.2fx", r["encrypted_over_clear"].get<double>());
    double busy = r["cpu_busy"].get<double>();
    std::printf("%-7s %5s %7llu %9.3f %10s %9s %9.2f %8.0f%%  %s%s\n",
                r["design"].get<std::string>().c_str(), r["encryption"].get<std::string>().c_str(),
                static_cast<unsigned long long>(r["version"].get<std::uint64_t>()),
                r["seconds"].get<double>(), ratio, enc_ratio, r["wan_copies_max"].get<double>(),
                busy * 100.0, per_dc.c_str(), busy >= kCpuBound ? "  (CPU-bound)" : "");
  }
  std::printf(
      "%u datacenter(s) x %u host(s) x %u rollout(s); host 0 of dc0 is the trainer's (store, "
      "publisher), every other host has the rollouts (and in seed a relay); WAN %s per "
      "datacenter, LAN %s per host; version %s%s\n",
      args.dcs, args.hosts_per_dc, args.rollouts_per_host, args.wan_rate.c_str(),
      args.lan_rate.c_str(), format_bytes(size).c_str(),
      args.versions_dir.empty() ? ""
                                : (" (real versions from " + args.versions_dir + ", v" +
                                   std::to_string(args.first_version) + " on)")
                                      .c_str());
  std::printf(
      "seconds: from the start of publish until every rollout holds the version; vs direct: "
      "direct's seconds over this row's; WAN copies: bytes through each datacenter's WAN link "
      "(its counters, control traffic included) over the version's size; enc: chunk stream "
      "encryption (auto: between datacenters only)%s\n",
      compare ? "; enc/clear: the clear row's seconds over this row's (1.00x: encryption costs "
                "nothing)"
              : "");
  if (cpu_bound) {
    std::printf(
        "CPU-bound rows: this machine's cores were at least %.0f%% busy, so they, not the "
        "emulated links, set the pace; lower --lan-rate/--wan-rate keep the emulation "
        "faithful\n",
        kCpuBound * 100.0);
  }
}

}  // namespace

int run_bench_crossdc(const BenchCrossdcArgs& args, const std::vector<std::string>& env) {
  if (auto e = crossdc_usage_error(args); !e.empty()) return usage_error(e);
  auto size = parse_bytes(args.size);
  auto chunk = parse_bytes(args.chunk);
  BenchCrossdcArgs real = args;  // with the versions' absolute folder and their size
  if (!args.versions_dir.empty()) {
    auto files = real_version_files(args.versions_dir, args.first_version, args.versions);
    if (!files.is_ok()) return usage_error("--versions-dir: " + files.status().message());
    real.versions_dir = std::filesystem::absolute(args.versions_dir).string();
    size = files->bytes;
    real.size = std::to_string(files->bytes);
  }
  if (!size.is_ok() || *size == 0) return usage_error("bad --size '" + args.size + "'");
  if (!chunk.is_ok() || *chunk == 0) return usage_error("bad --chunk '" + args.chunk + "'");
  std::vector<std::string> designs, encryptions;
  if (auto e = parse_names(args.designs, {"direct", "seed", "delta", "default"}, "design", designs);
      !e.empty()) {
    return usage_error(e);
  }
  if (designs.empty()) return usage_error("--designs names no design");
  if (auto e = parse_names(args.encryptions, {"auto", "on", "off"}, "encryption", encryptions);
      !e.empty()) {
    return usage_error(e);
  }
  if (encryptions.empty()) return usage_error("--encryption names no setting");
  if (::geteuid() != 0) {
    std::fprintf(stderr, "bench crossdc: needs root (network namespaces and tc)\n");
    return 1;
  }
  std::string emu = find_emuhosts(env);
  if (emu.empty()) {
    std::fprintf(stderr, "bench crossdc: cannot find scripts/emuhosts.sh (set SLUICE_EMUHOSTS)\n");
    return 1;
  }
  const std::string prefix = "sluice-dc";
  std::vector<nlohmann::json> rows;
  for (const auto& design : designs) {
    for (const auto& encryption : encryptions) {
      if (!run_pass(args, real, emu, prefix, design, encryption, rows)) return 1;
    }
  }
  const bool cpu_bound = add_ratios(rows);
  if (args.json) {
    for (const auto& r : rows)
      std::printf("%s\n", r.dump().c_str());
    return 0;
  }
  print_crossdc_table(args, rows, *size, encryptions.size() > 1, cpu_bound);
  return 0;
}

}  // namespace sluice::cli
