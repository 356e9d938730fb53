// `sluice bench crossdc`: the outer command (see bench_crossdc.hpp): sets up the datacenters for
// each design, runs `bench crossdc-run` inside host 0, and prints the figures side by side.
#include "bench/bench_crossdc.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/bench_util.hpp"
#include "core/event_loop.hpp"
#include "core/process.hpp"
#include "core/units.hpp"

namespace sluice::cli {

using namespace sluice::core;

namespace {

// All cores at least this busy during a version's spread: the machine, not the links, paced it.
constexpr double kCpuBound = 0.9;
const std::vector<std::string> kUcxEnv = {"UCX_TLS=tcp", "UCX_NET_DEVICES=eth0",
                                          "UCX_WARN_UNUSED_ENV_VARS=n"};

Result<std::string> run_capture(const std::vector<std::string>& argv,
                                const std::vector<std::string>& env, Millis timeout) {
  Subprocess::Options o;
  o.argv = argv;
  o.extra_env = env;
  SLUICE_ASSIGN_OR_RETURN(auto p, Subprocess::spawn(o));
  std::string out = p->read_all(timeout);
  SLUICE_ASSIGN_OR_RETURN(int code, p->wait(Millis(10000)));
  if (code != 0) {
    return internal_error(argv[0] + " " + argv[1] + " exited " + std::to_string(code) + ": " +
                          out.substr(out.size() > 2000 ? out.size() - 2000 : 0));
  }
  return out;
}

int usage_error(const std::string& what) {
  std::fprintf(stderr, "bench crossdc: %s\n", what.c_str());
  return 2;
}

}  // namespace

BenchCrossdcCommands add_bench_crossdc(CLI::App& bench, BenchCrossdcArgs& a) {
  BenchCrossdcCommands c;
  c.outer = bench.add_subcommand(
      "crossdc",
      "rollouts in emulated datacenters behind WAN links: WAN bytes per version and time until "
      "every rollout holds it, for direct and one seed per datacenter");
  c.outer->add_option("--dcs", a.dcs, "datacenters")->capture_default_str();
  c.outer->add_option("--hosts-per-dc", a.hosts_per_dc, "hosts per datacenter (host 0: trainer)")
      ->capture_default_str();
  c.outer->add_option("--rollouts-per-host", a.rollouts_per_host, "rollouts on each host")
      ->capture_default_str();
  c.outer->add_option("--wan-rate", a.wan_rate, "each datacenter's WAN link, both ways (tc)")
      ->capture_default_str();
  c.outer->add_option("--lan-rate", a.lan_rate, "each host's link, both ways (tc)")
      ->capture_default_str();
  c.outer->add_option("--size", a.size, "version size")->capture_default_str();
  c.outer->add_option("--chunk", a.chunk, "chunk size")->capture_default_str();
  c.outer->add_option("--versions", a.versions, "versions published, one after another (>= 2)")
      ->capture_default_str();
  c.outer
      ->add_option("--change-rate", a.change_rate,
                   "fraction of elements each version changes against the one before")
      ->capture_default_str();
  c.outer
      ->add_option("--versions-dir", a.versions_dir,
                   "publish real versions from here (v<N>.bin, from `bench delta "
                   "--save-versions`) instead of synthetic ones")
      ->capture_default_str();
  c.outer->add_option("--first-version", a.first_version, "--versions-dir: the first v<N>.bin")
      ->capture_default_str();
  c.outer->add_option("--designs", a.designs, "direct, seed, delta")->capture_default_str();
  c.outer->add_option("--poll-ms", a.poll_ms, "how often a rollout asks for a newer version")
      ->capture_default_str();
  c.outer
      ->add_option("--local-check-ms", a.local_check_ms,
                   "seed: how often a rollout waiting for its host's relay asks for a plan again")
      ->capture_default_str();
  c.outer
      ->add_option("--relay-follow-ms", a.relay_follow_ms,
                   "seed, delta: how often a receiving relay asks the store for its source's "
                   "progress (relay.follow_poll_ms)")
      ->capture_default_str();
  c.outer
      ->add_option("--encryption", a.encryptions,
                   "chunk stream encryption: auto, on, off, or a list (off,on) to run each design "
                   "with each and print encrypted/clear")
      ->capture_default_str();
  c.outer->add_flag("--json", a.json, "one JSON object per row");

  for (CLI::App** sub : {&c.run, &c.host}) {
    *sub = bench.add_subcommand(sub == &c.run ? "crossdc-run" : "crossdc-host",
                                "one part of bench crossdc");
    (*sub)->group("");
    (*sub)->add_option("--design", a.design);
    (*sub)->add_option("--dcs", a.dcs);
    (*sub)->add_option("--hosts-per-dc", a.hosts_per_dc);
    (*sub)->add_option("--rollouts-per-host", a.rollouts_per_host);
    (*sub)->add_option("--size", a.size);
    (*sub)->add_option("--chunk", a.chunk);
    (*sub)->add_option("--versions", a.versions);
    (*sub)->add_option("--change-rate", a.change_rate);
    (*sub)->add_option("--versions-dir", a.versions_dir);
    (*sub)->add_option("--first-version", a.first_version);
    (*sub)->add_option("--poll-ms", a.poll_ms);
    (*sub)->add_option("--local-check-ms", a.local_check_ms);
    (*sub)->add_option("--relay-follow-ms", a.relay_follow_ms);
    (*sub)->add_option("--emuhosts", a.emuhosts);
    (*sub)->add_option("--prefix", a.prefix);
    (*sub)->add_option("--store", a.store);
    (*sub)->add_option("--keys", a.keys);
    (*sub)->add_option("--index", a.index);
    (*sub)->add_option("--encryption", a.encryption);
  }
  return c;
}

int run_bench_crossdc(const BenchCrossdcCommands& c, const BenchCrossdcArgs& args,
                      const std::vector<std::string>& env) {
  if (c.run && c.run->parsed()) return run_bench_crossdc_inside(args, env);
  if (c.host && c.host->parsed()) return run_bench_crossdc_host(args, env);
  if (!c.outer || !c.outer->parsed()) return -1;

  if (args.dcs < 1 || args.dcs > 16) return usage_error("--dcs must be between 1 and 16");
  if (args.hosts_per_dc < 1 || args.dcs * args.hosts_per_dc < 2 ||
      args.dcs * args.hosts_per_dc > 64) {
    return usage_error("--dcs x --hosts-per-dc must be between 2 and 64 hosts");
  }
  if (args.rollouts_per_host < 1 || args.rollouts_per_host > 16)
    return usage_error("--rollouts-per-host must be between 1 and 16");
  if (args.versions < 2 || args.versions > 20)
    return usage_error("--versions must be between 2 and 20");
  if (!(args.change_rate > 0.0 && args.change_rate <= 1.0))
    return usage_error("--change-rate must be in (0, 1]");
  if (args.poll_ms < 1 || args.poll_ms > 10000)
    return usage_error("--poll-ms must be between 1 and 10000");
  if (args.local_check_ms < 1 || args.local_check_ms > 10000)
    return usage_error("--local-check-ms must be between 1 and 10000");
  if (args.relay_follow_ms < 1 || args.relay_follow_ms > 1000)
    return usage_error("--relay-follow-ms must be between 1 and 1000");
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
  std::vector<std::string> designs;
  std::stringstream ss(args.designs);
  for (std::string d; std::getline(ss, d, ',');) {
    if (d != "direct" && d != "seed" && d != "delta")
      return usage_error("unknown design '" + d + "' (direct, seed, delta)");
    if (std::find(designs.begin(), designs.end(), d) == designs.end()) designs.push_back(d);
  }
  if (designs.empty()) return usage_error("--designs names no design");
  std::vector<std::string> encryptions;
  std::stringstream es(args.encryptions);
  for (std::string e; std::getline(es, e, ',');) {
    if (e != "auto" && e != "on" && e != "off")
      return usage_error("unknown encryption '" + e + "' (auto, on, off)");
    if (std::find(encryptions.begin(), encryptions.end(), e) == encryptions.end())
      encryptions.push_back(e);
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
  std::vector<std::pair<std::string, std::string>> passes;  // (design, encryption)
  for (const auto& design : designs)
    for (const auto& e : encryptions)
      passes.emplace_back(design, e);
  for (const auto& [design, encryption] : passes) {
    if (!args.json)
      std::fprintf(stderr, "bench crossdc: %s, encryption %s...\n", design.c_str(),
                   encryption.c_str());
    auto up = run_capture({emu, "up", "--dcs", std::to_string(args.dcs), "--hosts-per-dc",
                           std::to_string(args.hosts_per_dc), "--lan-rate", args.lan_rate,
                           "--wan-rate", args.wan_rate, "--prefix", prefix},
                          {}, Millis(120000));
    if (!up.is_ok()) {
      std::fprintf(stderr, "bench crossdc: %s\n", up.status().to_string().c_str());
      return 1;
    }
    auto out = run_capture({emu,
                            "exec",
                            "--prefix",
                            prefix,
                            "0",
                            self_exe(),
                            "--log-level",
                            "warn",
                            "bench",
                            "crossdc-run",
                            "--design",
                            design,
                            "--dcs",
                            std::to_string(args.dcs),
                            "--hosts-per-dc",
                            std::to_string(args.hosts_per_dc),
                            "--rollouts-per-host",
                            std::to_string(args.rollouts_per_host),
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
                            "--poll-ms",
                            std::to_string(args.poll_ms),
                            "--local-check-ms",
                            std::to_string(args.local_check_ms),
                            "--relay-follow-ms",
                            std::to_string(args.relay_follow_ms),
                            "--emuhosts",
                            emu,
                            "--prefix",
                            prefix,
                            "--encryption",
                            encryption},
                           kUcxEnv, Millis(1800000));
    run_capture({emu, "down", "--prefix", prefix}, {}, Millis(60000)).status().ignore();
    if (!out.is_ok()) {
      std::fprintf(stderr, "bench crossdc: %s: %s\n", design.c_str(),
                   out.status().to_string().c_str());
      return 1;
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
      return 1;
    }
  }

  // Per row: WAN bytes in copies of the version, the time against "direct"'s for the same
  // version and encryption in this run, and (encrypted rows) clear's time over this row's.
  using Key = std::pair<std::uint64_t, std::string>;
  std::map<Key, double> direct_s;
  std::map<std::pair<std::string, std::uint64_t>, double> clear_s;  // (design, version)
  for (const auto& r : rows) {
    const auto v = r["version"].get<std::uint64_t>();
    if (r["design"] == "direct") direct_s[{v, r["encryption"].get<std::string>()}] = r["seconds"];
    if (r["encryption"] == "off") clear_s[{r["design"].get<std::string>(), v}] = r["seconds"];
  }
  const bool compare = encryptions.size() > 1;
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
  if (args.json) {
    for (const auto& r : rows)
      std::printf("%s\n", r.dump().c_str());
    return 0;
  }
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
      args.lan_rate.c_str(), format_bytes(*size).c_str(),
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
  return 0;
}

}  // namespace sluice::cli
