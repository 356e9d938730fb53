// `sluice bench broadcast`: how long until every relay holds a new version, for N relays in
// emulated hosts behind rate-limited links, for the pipelined chain, a tree, and the naive design
// in which every relay pulls its copy straight from the publisher ("direct"); and the
// publisher's stall (time blocked in publish) against one memcpy of the same bytes.
//
// The outer command sets up the hosts for each run and starts `bench broadcast-run` inside host
// 0, which runs the store and the publisher there, starts a relay in each other host, and
// prints one JSON line.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "actor/publisher.hpp"
#include "bench/bench_broadcast.hpp"
#include "bench/bench_util.hpp"
#include "bench/harness.hpp"
#include "core/log.hpp"
#include "core/process.hpp"
#include "core/units.hpp"
#include "wire/security.hpp"

namespace sluice::cli {

using namespace sluice::core;

namespace {

// All cores at least this busy during a broadcast: the machine, not the emulated links, paced it.
constexpr double kCpuBound = 0.9;
// Started relays join the store within this; every relay holds the version within kAllHold.
constexpr Millis kRelaysJoin{500};
constexpr Millis kAllHold{300000};

}  // namespace

int run_bench_broadcast(const BenchBroadcastArgs& args, const std::vector<std::string>& env) {
  if (::geteuid() != 0) {
    std::fprintf(stderr, "bench broadcast: needs root (network namespaces and tc)\n");
    return 1;
  }
  std::string emu = find_emuhosts(env);
  if (emu.empty()) {
    std::fprintf(stderr,
                 "bench broadcast: cannot find scripts/emuhosts.sh (set SLUICE_EMUHOSTS)\n");
    return 1;
  }
  if (args.relays < 1 || args.relays > 32) {
    std::fprintf(stderr, "bench broadcast: --relays must be between 1 and 32\n");
    return 2;
  }
  std::vector<std::string> designs;
  std::stringstream ss(args.designs);
  for (std::string d; std::getline(ss, d, ',');) {
    if (d != "chain" && d != "tree" && d != "direct") {
      std::fprintf(stderr, "bench broadcast: unknown design '%s' (chain, tree, direct)\n",
                   d.c_str());
      return 2;
    }
    designs.push_back(d);
  }
  const std::string prefix = "sluice-bb";
  std::vector<nlohmann::json> rows;
  nlohmann::json stall;
  for (const auto& design : designs) {
    double t1 = 0;
    for (unsigned n : {1u, args.relays}) {
      if (n == 1 && !rows.empty() && rows.back()["design"] == design) continue;
      if (!args.json)
        std::fprintf(stderr, "bench broadcast: %s, %u relay(s)...\n", design.c_str(), n);
      std::vector<std::string> up_args = {
          emu, "up", std::to_string(n + 1), "--rate", args.link_rate, "--prefix", prefix};
      if (!args.link_latency.empty()) {
        up_args.push_back("--latency");
        up_args.push_back(args.link_latency);
      }
      auto up = run_capture(up_args, {}, kHostsUpTimeout);
      if (!up.is_ok()) {
        std::fprintf(stderr, "bench broadcast: %s\n", up.status().to_string().c_str());
        return 1;
      }
      std::vector<std::string> run_argv = in_emulated_host(emu, prefix, 0);
      run_argv.insert(
          run_argv.end(),
          {self_exe(), "--log-level", "warn", "bench", "broadcast-run", "--design", design,
           "--relays", std::to_string(n), "--size", args.size, "--chunk", args.chunk, "--fanout",
           std::to_string(args.fanout), "--emuhosts", emu, "--prefix", prefix});
      auto out = run_capture(run_argv, kEmulatedHostUcxEnv, kRunTimeout);
      run_capture({emu, "down", "--prefix", prefix}, {}, kHostsDownTimeout).status().ignore();
      if (!out.is_ok()) {
        std::fprintf(stderr, "bench broadcast: %s relays=%u: %s\n", design.c_str(), n,
                     out.status().to_string().c_str());
        return 1;
      }
      std::string line = out->substr(0, out->find('\n'));
      auto pos = out->rfind("{\"");
      if (pos != std::string::npos) line = out->substr(pos, out->find('\n', pos) - pos);
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded()) {
        std::fprintf(stderr, "bench broadcast: run printed '%s'\n", out->c_str());
        return 1;
      }
      if (n == 1) t1 = j["seconds"].get<double>();
      nlohmann::json row = {{"design", design},
                            {"relays", n},
                            {"bytes", j["bytes"]},
                            {"seconds", j["seconds"]},
                            {"ratio_to_one", t1 > 0 ? j["seconds"].get<double>() / t1 : 1.0},
                            {"cpu_busy", j.value("cpu_busy", 0.0)}};
      rows.push_back(row);
      if (stall.is_null() ||
          j["publish_stall_s"].get<double>() < stall["publish_stall_s"].get<double>()) {
        stall = {{"publish_stall_s", j["publish_stall_s"]}, {"memcpy_s", j["memcpy_s"]}};
      }
    }
  }
  if (args.json) {
    for (const auto& r : rows)
      std::printf("%s\n", r.dump().c_str());
    std::printf("%s\n", stall.dump().c_str());
    return 0;
  }
  std::printf("%-8s %7s %10s %9s %12s %9s\n", "design", "relays", "bytes", "seconds", "T(N)/T(1)",
              "CPU busy");
  bool cpu_bound = false;
  for (const auto& r : rows) {
    double busy = r["cpu_busy"].get<double>();
    cpu_bound = cpu_bound || busy >= kCpuBound;
    std::printf("%-8s %7u %10s %9.3f %12.2f %8.0f%%%s\n", r["design"].get<std::string>().c_str(),
                r["relays"].get<unsigned>(), format_bytes(r["bytes"].get<std::uint64_t>()).c_str(),
                r["seconds"].get<double>(), r["ratio_to_one"].get<double>(), busy * 100.0,
                busy >= kCpuBound ? "  (CPU-bound)" : "");
  }
  double st = stall["publish_stall_s"].get<double>(), mc = stall["memcpy_s"].get<double>();
  std::printf("publisher stall %.4f s against one memcpy of the same bytes %.4f s: %.2fx\n", st, mc,
              mc > 0 ? st / mc : 0.0);
  std::printf(
      "link %s per host; the publisher and the store share host 0, each relay has a host; "
      "T: from the start of publish until every relay holds every chunk\n",
      args.link_rate.c_str());
  if (cpu_bound) {
    std::printf(
        "CPU-bound rows: this machine's cores were at least %.0f%% busy during the broadcast, so "
        "they, not the emulated links, set its pace; a lower --link-rate keeps the emulation "
        "faithful\n",
        kCpuBound * 100.0);
  }
  return 0;
}

namespace {

// Relays relay-1 .. relay-N, one in each emulated host, started in turn (the join order is the
// chain's order); each added to `relays` and `ids` once ready.
Status start_relays(const BenchBroadcastArgs& args, const std::string& exe,
                    const std::string& store_ep, const std::string& keys,
                    std::vector<std::unique_ptr<Subprocess>>& relays,
                    std::vector<std::string>& ids) {
  const std::string members = members_file_path(keys);
  for (unsigned i = 1; i <= args.relays; ++i) {
    Subprocess::Options ro;
    std::string id = "relay-" + std::to_string(i);
    ro.argv = in_emulated_host(args.emuhosts, args.prefix, i);
    ro.argv.insert(ro.argv.end(),
                   {exe, "--log-level", "warn", "relay", "--set", "relay.store=" + store_ep,
                    "--set", "relay.relay_id=" + id, "--set", "relay.poll_ms=10", "--set",
                    "relay.security.key_file=" + key_file_path(keys, id), "--set",
                    "relay.security.members_file=" + members});
    SLUICE_ASSIGN_OR_RETURN(Started r, start_ready(ro, "", kRoleStartTimeout, id));
    relays.push_back(std::move(r.proc));
    ids.push_back(id);
    std::this_thread::sleep_for(kJoinOrderPause);
  }
  return {};
}

// One memcpy of `src` into memory already touched: the baseline for the publisher's stall.
double memcpy_seconds(const std::vector<std::uint8_t>& src) {
  std::vector<std::uint8_t> dst(src.size(), 1);
  auto t0 = Clock::now();
  std::memcpy(dst.data(), src.data(), src.size());
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int run_bench_broadcast_inside(const BenchBroadcastArgs& args,
                               const std::vector<std::string>& env) {
  (void)env;
  auto size = parse_bytes(args.size);
  auto chunk = parse_bytes(args.chunk);
  if (!size.is_ok() || !chunk.is_ok()) return 2;
  const std::string exe = self_exe();
  const std::string store_ep = "tcp://198.18.0.1:5550";
  // Authenticated as a job is: keys for the store, the publisher (the actor) and each relay, in
  // a private folder removed at the end.
  std::vector<std::pair<std::string, std::string>> relay_ids;
  for (unsigned i = 1; i <= args.relays; ++i)
    relay_ids.emplace_back("relay-" + std::to_string(i), kRoleRelay);
  auto made = BenchKeys::make("broadcast", relay_ids);
  if (!made.is_ok()) {
    std::fprintf(stderr, "broadcast-run: %s\n", made.status().to_string().c_str());
    return 1;
  }
  const std::unique_ptr<BenchKeys> job_keys = std::move(made).value();
  const std::string& keys = job_keys->dir();
  Subprocess::Options so;
  so.argv = {exe,     "--log-level",
             "warn",  "weightstore",
             "--set", "store.listen=" + store_ep,
             "--set", "store.broadcast=" + args.design,
             "--set", "store.fanout=" + std::to_string(args.fanout)};
  const std::vector<std::string> store_sets = job_keys->store_sets();
  so.argv.insert(so.argv.end(), store_sets.begin(), store_sets.end());
  auto store = start_ready(so, "endpoint ", kRoleStartTimeout, "the store");
  if (!store.is_ok()) return 1;
  std::vector<std::unique_ptr<Subprocess>> relays;
  std::vector<std::string> ids;
  if (!start_relays(args, exe, store_ep, keys, relays, ids).is_ok()) return 1;
  auto loop = EventLoop::create().value();
  TransferOptions topts;
  topts.stream_reach = store_ep;  // the chunk server binds where the emulated hosts reach it
  auto engine = TransferEngine::create(*loop, topts).value();
  auto security = load_security(job_keys->security("actor"), "broadcast-run");
  if (!security.is_ok()) {
    std::fprintf(stderr, "broadcast-run: %s\n", security.status().to_string().c_str());
    return 1;
  }
  auto client = weightstore::StoreClient::create(*loop, store_ep, *security).value();
  loop->run_until([] { return false; }, kRelaysJoin);
  actor::PublisherOptions po;
  po.model = "policy";
  po.holder_id = "actor-0";
  po.chunk_bytes = *chunk;
  // "direct" measures the publisher sending every relay its own copy, so it must keep serving;
  // in a chain or tree it hands the version off once the first relay holds all of it, and the
  // relays still reading from it keep it until they are done (the store does not count its copy
  // as drained while they are).
  po.handoff = args.design != "direct";
  auto pub = actor::Publisher::create(*loop, *engine, *client, po).value();
  auto beat = loop->every(kBenchHeartbeat, [&] { pub->heartbeat(); });
  std::vector<std::uint8_t> weights(*size);
  fill_pseudo_random(weights.data(), weights.size(), 99);
  // Staging memory is set up ahead, as a trainer does once at start-up.
  if (!pub->reserve(*size, 1).is_ok()) return 1;
  const double memcpy_s = memcpy_seconds(weights);
  const CpuTimes cpu0 = read_cpu_times();
  auto t0 = Clock::now();
  std::optional<Result<Manifest>> committed;
  Status st = pub->publish_async(1, {{"w", "U8", {weights.size()}, weights.data(), weights.size()}},
                                 [&](Result<Manifest> r) { committed.emplace(std::move(r)); });
  // The stall is the time the trainer is blocked: publish_async returns after the copy.
  double stall = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!st.is_ok()) {
    std::fprintf(stderr, "broadcast-run: %s\n", st.to_string().c_str());
    return 1;
  }
  loop->run_until([&] { return committed.has_value(); }, kCommitTimeout);
  if (!committed || !committed->is_ok()) {
    std::fprintf(stderr, "broadcast-run: not committed: %s\n",
                 committed ? committed->status().to_string().c_str() : "timeout");
    return 1;
  }
  const Manifest* m = &committed->value();
  auto complete = [&] {
    auto r = client->copies("policy", 1);
    if (!r.is_ok()) return false;
    for (const auto& id : ids) {
      auto it = r->find(id);
      if (it == r->end() || it->second != m->chunk_count()) return false;
    }
    return true;
  };
  while (!complete()) {
    if (Clock::now() - t0 > kAllHold) {
      std::fprintf(stderr, "broadcast-run: relays did not finish within %lld s\n",
                   static_cast<long long>(kAllHold.count() / 1000));
      return 1;
    }
    loop->run_until([] { return false; }, kProgressPoll);
  }
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  double cpu_busy = cpu_busy_fraction(cpu0, read_cpu_times());
  nlohmann::json j = {{"design", args.design}, {"relays", args.relays},    {"bytes", *size},
                      {"seconds", seconds},    {"publish_stall_s", stall}, {"memcpy_s", memcpy_s},
                      {"cpu_busy", cpu_busy}};
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
  for (auto& r : relays)
    r->signal(SIGTERM).ignore();
  store->proc->signal(SIGTERM).ignore();
  return 0;
}

}  // namespace sluice::cli
