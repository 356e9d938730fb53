// `bench crossdc-run` (inside host 0: the store, the publisher, and the other hosts' processes)
// and `bench crossdc-host` (inside one rollout host: its rollouts' readers). See
// bench_crossdc.hpp.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "actor/publisher.hpp"
#include "bench/bench_crossdc.hpp"
#include "bench/bench_util.hpp"
#include "bench/harness.hpp"
#include "core/log.hpp"
#include "core/process.hpp"
#include "core/units.hpp"
#include "weightstore/reader.hpp"
#include "wire/security.hpp"

namespace sluice::cli {

using namespace sluice::core;

namespace {

// emuhosts.sh wan answers within kWanQuery; rollout hosts print ready within kRolloutHostStart;
// every rollout holds a version within kAllHold; kSettle lets hand-offs and retirements settle
// before the next version is timed; relays join the store within kRelaysJoin.
constexpr Millis kWanQuery{10000};
constexpr Millis kRolloutHostStart{30000};
constexpr Millis kAllHold{600000};
constexpr Millis kSettle{1000};
constexpr Millis kRelaysJoin{1000};
// A rollout host's reads: long enough that no read gives up under direct's contention (see
// there); its local wait longer than any run; its loop's turn while it waits for SIGTERM.
constexpr Millis kCrossdcGetTimeout{120000};
constexpr Millis kCrossdcLocalWait{60000};
constexpr Millis kIdleTurn{1000};

std::string host_label(unsigned i) {
  return "h" + std::to_string(i);
}
std::string dc_label(unsigned dc) {
  return "dc" + std::to_string(dc);
}
std::string rollout_identity(unsigned host) {
  return "rollout-" + std::to_string(host);
}
std::string relay_identity(unsigned host) {
  return "relay-" + std::to_string(host);
}
std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

// Each datacenter's WAN bytes so far, egress and ingress (emuhosts.sh wan).
struct Wan {
  std::vector<std::uint64_t> egress, ingress;
};
Result<Wan> read_wan(const std::string& emu, const std::string& prefix, unsigned dcs) {
  SLUICE_ASSIGN_OR_RETURN(std::string out,
                          run_capture({emu, "wan", "--prefix", prefix}, {}, kWanQuery, true));
  Wan w;
  w.egress.assign(dcs, 0);
  w.ingress.assign(dcs, 0);
  std::istringstream in(out);
  std::string word_dc, word_out, word_in;
  unsigned d = 0;
  std::uint64_t e = 0, i = 0;
  unsigned seen = 0;
  while (in >> word_dc >> d >> word_out >> e >> word_in >> i) {
    if (d >= dcs) return internal_error("emuhosts.sh wan: datacenter " + std::to_string(d));
    w.egress[d] = e;
    w.ingress[d] = i;
    ++seen;
  }
  if (seen != dcs) return internal_error("emuhosts.sh wan printed: " + out);
  return w;
}

// `base` with about `rate` of its 4-byte elements changed, at places drawn from `seed`.
void change_elements(std::vector<std::uint8_t>& w, double rate, std::uint64_t seed) {
  std::size_t elements = w.size() / 4;
  auto n = static_cast<std::size_t>(static_cast<double>(elements) * rate);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t k = 0; k < n && elements > 0; ++k) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
    std::size_t at = (x % elements) * 4;
    for (int b = 0; b < 4; ++b)
      w[at + b] = static_cast<std::uint8_t>(w[at + b] + 1 + ((x >> (8 * b)) & 0x7f));
  }
}

const char* kModel = "policy";

}  // namespace

Result<RealVersionFiles> real_version_files(const std::string& dir, unsigned first,
                                            unsigned count) {
  RealVersionFiles out;
  for (unsigned v = first; v < first + count; ++v) {
    const std::string path = dir + "/v" + std::to_string(v) + ".bin";
    std::error_code ec;
    const std::uint64_t n = std::filesystem::file_size(path, ec);
    if (ec) return invalid_argument(path + ": " + ec.message());
    if (n == 0) return invalid_argument(path + " is empty");
    if (out.bytes != 0 && n != out.bytes) {
      return invalid_argument(path + " has " + std::to_string(n) + " bytes, the versions before " +
                              std::to_string(out.bytes));
    }
    out.bytes = n;
    out.paths.push_back(path);
  }
  return out;
}

namespace {

// One relay per rollout host, joined datacenter by datacenter (the store chains the seeds in
// the order they join, after the publisher's datacenter); each added to `children` once ready.
Status start_relays(const BenchCrossdcArgs& args, const std::string& exe,
                    const std::string& store_ep, const std::string& keys,
                    std::vector<std::unique_ptr<Subprocess>>& children) {
  const unsigned hosts = args.dcs * args.hosts_per_dc;
  const std::string members = members_file_path(keys);
  for (unsigned i = 1; i < hosts; ++i) {
    Subprocess::Options ro;
    ro.argv = in_emulated_host(args.emuhosts, args.prefix, i);
    ro.argv.insert(
        ro.argv.end(),
        {exe, "--log-level", "warn", "relay", "--set", "log_level=warn", "--set",
         "relay.store=" + store_ep, "--set", "relay.relay_id=" + relay_identity(i), "--set",
         "relay.poll_ms=50", "--set",
         "relay.follow_poll_ms=" + std::to_string(args.relay_follow_ms), "--set",
         "relay.latest_wait_ms=" + std::to_string(args.wait_ms), "--set",
         "relay.follow_wait_ms=" + std::to_string(args.wait_ms), "--set",
         "relay.host=" + host_label(i), "--set",
         "relay.datacenter=" + dc_label(i / args.hosts_per_dc),
         // "delta": the trainer's datacenter's seed (host 1) makes N -> N+1 deltas (one
         // maker is enough: encoding costs CPU); every relay whose source is in another
         // datacenter (the other seeds) reads one when it holds N. "seed": no deltas at all.
         // "default": no delta setting (every seed that another datacenter reads from makes
         // them, as the store tells it).
         "--set",
         std::string("relay.make_deltas=") +
             (args.design == "delta" && i == 1 && args.hosts_per_dc > 1 ? "true" : "false"),
         "--set",
         std::string("relay.deltas_for_other_datacenters=") +
             (args.design == "default" ? "true" : "false"),
         "--set", std::string("relay.use_deltas=") + (args.design == "seed" ? "false" : "true"),
         "--set", "relay.security.key_file=" + key_file_path(keys, relay_identity(i)), "--set",
         "relay.security.members_file=" + members, "--set",
         "relay.stream_encryption=" + args.encryption});
    auto r = start_ready(ro, "", kRoleStartTimeout, relay_identity(i));
    if (!r.is_ok()) return r.status();
    children.push_back(std::move(r->proc));
    std::this_thread::sleep_for(kJoinOrderPause);
  }
  return {};
}

// One process per rollout host holds its rollouts' readers; each added to `children`, and
// returned once all are ready.
Result<std::vector<Subprocess*>> start_rollout_hosts(
    const BenchCrossdcArgs& args, const std::string& exe, const std::string& store_ep,
    const std::string& keys, std::vector<std::unique_ptr<Subprocess>>& children) {
  const unsigned hosts = args.dcs * args.hosts_per_dc;
  std::vector<Subprocess*> rollout_hosts;
  for (unsigned i = 1; i < hosts; ++i) {
    Subprocess::Options ho;
    ho.argv = in_emulated_host(args.emuhosts, args.prefix, i);
    const std::vector<std::string> part = crossdc_part_argv(exe, "crossdc-host", args);
    ho.argv.insert(ho.argv.end(), part.begin(), part.end());
    ho.argv.insert(ho.argv.end(),
                   {"--store", store_ep, "--keys", keys, "--index", std::to_string(i)});
    // Ended with this process however it ends (the namespace's exec keeps the pid).
    ho.extra_env = {std::string(kParentPidVar) + "=" + std::to_string(::getpid())};
    auto h = Subprocess::spawn(ho);
    if (!h.is_ok()) return h.status();
    children.push_back(std::move(h).value());
    rollout_hosts.push_back(children.back().get());
  }
  for (auto* h : rollout_hosts) {
    auto l = h->read_line(kRolloutHostStart);
    if (!l.is_ok() || *l != "ready") return internal_error("a rollout host did not start");
  }
  return rollout_hosts;
}

// Publishes --versions versions one after another and prints, for each, a JSON line: the time
// until every rollout holds it, the CPU busy meanwhile and each datacenter's WAN bytes. False when
// one failed (said on stderr).
bool publish_versions(const BenchCrossdcArgs& args, EventLoop& loop, actor::Publisher& pub,
                      const std::vector<Subprocess*>& rollout_hosts, std::uint64_t size) {
  auto failed = [](const std::string& what) {
    std::fprintf(stderr, "crossdc-run: %s\n", what.c_str());
    return false;
  };
  const std::size_t readers = rollout_hosts.size() * args.rollouts_per_host;
  std::map<std::uint64_t, std::map<std::string, std::uint64_t>> held;  // version -> reader -> ns
  auto collect = [&] {
    for (auto* h : rollout_hosts) {
      for (const auto& line : h->drain_lines()) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.contains("v")) continue;
        held[j["v"].get<std::uint64_t>()][j["r"].get<std::string>()] = j["t"].get<std::uint64_t>();
      }
    }
  };
  std::vector<std::uint8_t> weights(size);
  std::vector<std::string> real_paths;  // --versions-dir: version v is real_paths[v - 1]
  if (!args.versions_dir.empty()) {
    auto files = real_version_files(args.versions_dir, args.first_version, args.versions);
    if (!files.is_ok()) return failed(files.status().to_string());
    if (files->bytes != weights.size()) return failed("--size is not the versions' size");
    real_paths = std::move(files->paths);
  } else {
    fill_pseudo_random(weights.data(), weights.size(), 99);
  }
  for (std::uint64_t v = 1; v <= args.versions; ++v) {
    if (!real_paths.empty()) {
      std::ifstream f(real_paths[v - 1], std::ios::binary);
      f.read(reinterpret_cast<char*>(weights.data()), static_cast<std::streamsize>(weights.size()));
      if (!f || f.gcount() != static_cast<std::streamsize>(weights.size()))
        return failed("cannot read " + real_paths[v - 1]);
    } else if (v > 1) {
      change_elements(weights, args.change_rate, v);
    }
    auto wan0 = read_wan(args.emuhosts, args.prefix, args.dcs);
    if (!wan0.is_ok()) return failed(wan0.status().to_string());
    const CpuTimes cpu0 = read_cpu_times();
    const std::uint64_t t0 = now_ns();
    std::optional<Result<Manifest>> committed;
    Status st =
        pub.publish_async(v, {{"w", "U8", {weights.size()}, weights.data(), weights.size()}},
                          [&](Result<Manifest> r) { committed.emplace(std::move(r)); });
    if (!st.is_ok()) return failed(st.to_string());
    loop.run_until([&] { return committed.has_value(); }, kCommitTimeout);
    if (!committed || !committed->is_ok()) {
      return failed("version " + std::to_string(v) +
                    " not committed: " + (committed ? committed->status().to_string() : "timeout"));
    }
    auto deadline = Clock::now() + kAllHold;
    while (collect(), held[v].size() < readers) {
      if (Clock::now() > deadline) {
        return failed(std::to_string(held[v].size()) + " of " + std::to_string(readers) +
                      " rollouts hold version " + std::to_string(v) + " after " +
                      std::to_string(kAllHold.count() / 1000) + " s");
      }
      for (auto* h : rollout_hosts)
        if (!h->running()) return failed("a rollout host exited");
      loop.run_until([] { return false; }, kProgressPoll);
    }
    double cpu_busy = cpu_busy_fraction(cpu0, read_cpu_times());
    auto wan1 = read_wan(args.emuhosts, args.prefix, args.dcs);
    if (!wan1.is_ok()) return failed(wan1.status().to_string());
    std::uint64_t last = 0;
    for (const auto& [r, t] : held[v])
      last = std::max(last, t);
    nlohmann::json egress = nlohmann::json::array(), ingress = nlohmann::json::array();
    for (unsigned d = 0; d < args.dcs; ++d) {
      egress.push_back(wan1->egress[d] - wan0->egress[d]);
      ingress.push_back(wan1->ingress[d] - wan0->ingress[d]);
    }
    nlohmann::json j = {{"design", args.design},
                        {"version", v},
                        {"bytes", size},
                        {"readers", readers},
                        {"seconds", last > t0 ? static_cast<double>(last - t0) / 1e9 : 0.0},
                        {"cpu_busy", cpu_busy},
                        {"egress", egress},
                        {"ingress", ingress}};
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
    // A moment for hand-offs and retirements to settle before the next version is timed.
    loop.run_until([] { return false; }, kSettle);
  }
  return true;
}

}  // namespace

int run_bench_crossdc_inside(const BenchCrossdcArgs& args, const std::vector<std::string>& env) {
  (void)env;
  auto size = parse_bytes(args.size);
  auto chunk = parse_bytes(args.chunk);
  if (!size.is_ok() || !chunk.is_ok()) return 2;
  const unsigned hosts = args.dcs * args.hosts_per_dc;
  const bool relays_on = args.design != "direct";
  const std::string exe = self_exe();
  const std::string store_ep = "tcp://198.18.0.1:5550";
  auto fail = [](const std::string& what) {
    std::fprintf(stderr, "crossdc-run: %s\n", what.c_str());
    return 1;
  };
  // Authenticated as a job is, keys in a private folder removed at the end.
  std::vector<std::pair<std::string, std::string>> host_ids;
  for (unsigned i = 1; i < hosts; ++i) {
    host_ids.emplace_back(relay_identity(i), kRoleRelay);
    host_ids.emplace_back(rollout_identity(i), kRoleRollout);
  }
  auto made = BenchKeys::make("crossdc", host_ids);
  if (!made.is_ok()) return fail(made.status().to_string());
  const std::unique_ptr<BenchKeys> job_keys = std::move(made).value();
  const std::string& keys = job_keys->dir();

  Subprocess::Options so;
  so.argv = {exe,     "--log-level",          "warn",  "weightstore",
             "--set", "log_level=warn",       "--set", "store.listen=" + store_ep,
             "--set", "store.broadcast=chain"};
  const std::vector<std::string> store_sets = job_keys->store_sets();
  so.argv.insert(so.argv.end(), store_sets.begin(), store_sets.end());
  auto store = start_ready(so, "endpoint ", kRoleStartTimeout, "the store");
  if (!store.is_ok()) return fail(store.status().to_string());
  // Everything started is stopped on the way out, whatever happens.
  std::vector<std::unique_ptr<Subprocess>> children;
  struct StopAll {
    std::vector<std::unique_ptr<Subprocess>>* c;
    Subprocess* store;
    ~StopAll() {
      for (auto& p : *c)
        p->signal(SIGTERM).ignore();
      store->signal(SIGTERM).ignore();
    }
  } stop_all{&children, store->proc.get()};

  if (relays_on) {
    if (auto st = start_relays(args, exe, store_ep, keys, children); !st.is_ok()) {
      return fail(st.to_string());
    }
  }
  auto started = start_rollout_hosts(args, exe, store_ep, keys, children);
  if (!started.is_ok()) return fail(started.status().message());
  const std::vector<Subprocess*> rollout_hosts = std::move(started).value();

  auto loop = EventLoop::create().value();
  auto security = load_security(job_keys->security("actor"), "crossdc-run");
  if (!security.is_ok()) return fail(security.status().to_string());
  TransferOptions topts;
  topts.stream_reach = store_ep;  // the chunk server binds where the emulated hosts reach it
  if (auto st = set_stream_security(topts, args.encryption, dc_label(0), *security, "actor");
      !st.is_ok())
    return fail(st.to_string());
  auto engine = TransferEngine::create(*loop, topts);
  if (!engine.is_ok()) return fail(engine.status().to_string());
  auto client = weightstore::StoreClient::create(*loop, store_ep, *security).value();
  loop->run_until([] { return false; }, kRelaysJoin);
  actor::PublisherOptions po;
  po.model = kModel;
  po.holder_id = "actor-0";
  po.chunk_bytes = *chunk;
  po.topology = {host_label(0), "", dc_label(0)};
  // "direct" has the publisher send every rollout its own copy, so it keeps serving; with relays
  // it hands each version off once they hold it.
  po.handoff = relays_on;
  auto pub = actor::Publisher::create(*loop, **engine, *client, po);
  if (!pub.is_ok()) return fail(pub.status().to_string());
  auto beat = loop->every(kBenchHeartbeat, [&] { (*pub)->heartbeat(); });
  if (auto st = (*pub)->reserve(*size, 2); !st.is_ok()) return fail(st.to_string());

  return publish_versions(args, *loop, **pub, rollout_hosts, *size) ? 0 : 1;
}

int run_bench_crossdc_host(const BenchCrossdcArgs& args, const std::vector<std::string>& env) {
  die_with_parent(env);
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "crossdc-host %u: %s\n", args.index, what.c_str());
    return 1;
  };
  if (args.hosts_per_dc == 0 || args.rollouts_per_host == 0) return fail("bad layout");
  auto loop = EventLoop::create();
  if (!loop.is_ok()) return fail(loop.status().to_string());
  SecurityConfig sc;
  sc.key_file = key_file_path(args.keys, rollout_identity(args.index));
  sc.members_file = members_file_path(args.keys);
  auto security = load_security(sc, "crossdc-host");
  if (!security.is_ok()) return fail(security.status().to_string());
  TransferOptions to;
  to.environment = env;
  to.stream_reach = args.store;
  if (auto st = set_stream_security(to, args.encryption, dc_label(args.index / args.hosts_per_dc),
                                    *security, rollout_identity(args.index));
      !st.is_ok())
    return fail(st.to_string());
  auto engine = TransferEngine::create(**loop, to);
  if (!engine.is_ok()) return fail(engine.status().to_string());
  auto client = weightstore::StoreClient::create(**loop, args.store, *security);
  if (!client.is_ok()) return fail(client.status().to_string());
  const bool direct = args.design == "direct";
  std::vector<std::unique_ptr<weightstore::Reader>> readers;
  std::vector<std::string> names;
  for (unsigned k = 0; k < args.rollouts_per_host; ++k) {
    weightstore::ReaderOptions ro;
    ro.model = kModel;
    names.push_back(rollout_identity(args.index) + "-" + std::to_string(k));
    // The rollouts read; they do not serve, so "direct" is every rollout on the trainer's copy
    // and "seed" every rollout on its host's relay.
    ro.serve = false;
    // Long enough that no read gives up under direct's contention (16 rollouts sharing one WAN
    // link take 20 s and more for a version; a chunk waited over 10 s, the default, and the
    // whole pull began again): the figures are the links', not retries'.
    ro.read.op_timeout = kCrossdcGetTimeout;
    ro.read.total_timeout = kRunTimeout;
    if (!direct) {
      ro.topology = {host_label(args.index), "", dc_label(args.index / args.hosts_per_dc)};
      ro.local_wait = kCrossdcLocalWait;  // longer than any run: never across the WAN
      // Each plan a waiting rollout asks for crosses the WAN (a few KiB).
      ro.local_check = Millis(args.local_check_ms);
    }
    ro.latest_wait = Millis(args.wait_ms);
    auto r = weightstore::Reader::create(**loop, **engine, **client, std::move(ro));
    if (!r.is_ok()) return fail(r.status().to_string());
    readers.push_back(std::move(r).value());
  }
  std::printf("ready\n");
  std::fflush(stdout);
  std::vector<std::uint64_t> reported(readers.size(), 0);
  auto poll = (*loop)->every(Millis(args.poll_ms), [&] {
    for (std::size_t k = 0; k < readers.size(); ++k) {
      if (readers[k]->pulling()) continue;
      readers[k]->pull_latest([&, k](Result<std::uint64_t> v) {
        if (!v.is_ok() || *v <= reported[k]) return;
        // Staged: every chunk verified. The rollout's safe point is now.
        if (readers[k]->staged_version() == *v) readers[k]->swap().status().ignore();
        reported[k] = *v;
        std::printf("{\"r\":\"%s\",\"v\":%llu,\"t\":%llu}\n", names[k].c_str(),
                    static_cast<unsigned long long>(*v), static_cast<unsigned long long>(now_ns()));
        std::fflush(stdout);
      });
    }
  });
  // Until the run ends it (SIGTERM), or its parent goes.
  for (;;)
    (*loop)->run_until([] { return false; }, kIdleTurn);
}

}  // namespace sluice::cli
