// `sluice bench transfer`: moves a region between two real processes with sluice's reader and,
// in the same run, with UCX's own ucx_perftest (ucp_get, same message size, same transport and
// settings), and prints both side by side with their ratio.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "bench/bench_util.hpp"
#include "bench/harness.hpp"
#include "bench/transfer_cmds.hpp"
#include "core/cuda_device.hpp"
#include "core/event_loop.hpp"
#include "core/log.hpp"
#include "core/process.hpp"
#include "core/units.hpp"
#include "wire/security.hpp"
#include "wire/transfer.hpp"

namespace sluice::cli {

using namespace sluice::core;

namespace {

// ucx_perftest's server listens within kPerftestListen; it exits within kPerftestExit of SIGTERM.
// A GPU reader (CUDA start-up and device registration) exits within kDeviceReaderExit.
constexpr Millis kPerftestListen{300};
constexpr Millis kPerftestExit{5000};
constexpr Millis kDeviceReaderExit{30000};
// The two-sources bench takes its hosts down within this (three hosts, one with no rate).
constexpr Millis kTwoSourcesDownTimeout{120000};

bool user_set(const std::vector<std::string>& env, const std::string& var) {
  for (const auto& e : env)
    if (e.rfind(var + "=", 0) == 0) return true;
  return false;
}

// The UCX environment for one transport: UCX_TLS from --transport, and for tcp sluice's UCX tcp
// defaults (core::ucx_env_defaults), so that ucx_perftest and sluice's --ucx-get readers run with
// the measured better segment size (chunk-stream readers have no UCX tcp to tune). What the user
// set stays as they set it.
std::vector<std::string> transport_env(const std::string& transport,
                                       const std::vector<std::string>& env) {
  std::vector<std::string> out = {"UCX_TLS=" + transport};
  if (transport == "tcp") {
    for (const auto& [var, value] : ucx_env_defaults(env, true))
      out.push_back(var + "=" + value);
  }
  // Loopback only: the machine's other interfaces stay out of a local measurement.
  if (!user_set(env, "UCX_NET_DEVICES")) out.push_back("UCX_NET_DEVICES=lo");
  // UCX prints this warning on stdout, where the children's results go.
  if (!user_set(env, "UCX_WARN_UNUSED_ENV_VARS")) out.push_back("UCX_WARN_UNUSED_ENV_VARS=n");
  return out;
}

struct Row {
  std::string transport;
  std::uint64_t bytes = 0;
  std::uint64_t chunk = 0;
  double seconds = 0;
  double gbps = 0;
  double perftest_gbps = 0;
  // ucx_perftest reading the whole region as one GET: the same number of distinct bytes as
  // sluice's read, where the chunk-sized GETs above re-read one buffer.
  double perftest_region_gbps = 0;
  double cold_seconds = 0;  // the first read, mapping included
  double memcpy_gbps = 0;
  std::string encryption = "-";  // tcp: chunk stream encryption off or on
  double cpu_per_gib = 0;        // CPU seconds of reader and source per GiB read (tcp)
  std::string note;

  // sluice / ucx_perftest, and sluice / the 1-GET run (0 where that run is missing).
  double ratio() const { return perftest_gbps > 0 ? gbps / perftest_gbps : 0.0; }
  double region_ratio() const {
    return perftest_region_gbps > 0 ? gbps / perftest_region_gbps : 0.0;
  }
};

// A transfer-source process serving `bytes` of test data (stopped when this object goes).
struct SourceProcess {
  std::unique_ptr<Subprocess> proc;
  std::string endpoint;
  ~SourceProcess() {
    if (!proc) return;
    proc->signal(SIGTERM).ignore();
    proc->wait(kExitWait).ignore();
  }
};

// Chunk stream encryption for a row: the job keys folder and "off" or "on" (no keys: clear).
struct Encryption {
  std::string keys;
  std::string setting = "off";
  void add_to(std::vector<std::string>& argv) const {
    if (keys.empty()) return;
    argv.insert(argv.end(), {"--keys", keys, "--encryption", setting});
  }
};

Result<std::unique_ptr<SourceProcess>> start_source(const std::vector<std::string>& extra_env,
                                                    const BenchTransferArgs& args,
                                                    std::uint64_t bytes, bool ucx_get = false,
                                                    const Encryption& enc = {}) {
  auto sp = std::make_unique<SourceProcess>();
  Subprocess::Options so;
  so.argv = {self_exe(), "--log-level",         "warn",    "transfer-source",
             "--bytes",  std::to_string(bytes), "--chunk", args.chunk};
  if (ucx_get) so.argv.push_back("--ucx-get");
  enc.add_to(so.argv);
  so.extra_env = extra_env;
  SLUICE_ASSIGN_OR_RETURN(Started started,
                          start_ready(so, "endpoint ", kSourceStartTimeout, "the transfer source"));
  sp->proc = std::move(started.proc);
  sp->endpoint = started.line.substr(9);
  return sp;
}

constexpr int kRepeat = 3;  // timed reads per reader process

// CPU seconds (user and system) a process has used so far, from /proc; 0 when unreadable.
double process_cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = text.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string f;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stoull(f);
    if (i == 15) stime = std::stoull(f);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// One reader process: three timed reads of the whole region, best reported. The first read also
// pays for mapping the holder's memory (page faults on first touch), which later pulls from the
// same holder do not; ucx_perftest likewise reports after its warm-up iterations.
Result<nlohmann::json> sluice_read(const std::vector<std::string>& extra_env,
                                   const BenchTransferArgs& args, const std::string& endpoint,
                                   bool ucx_get = false, const Encryption& enc = {}) {
  Subprocess::Options ro;
  ro.argv = {self_exe(),     "--log-level", "warn",        "transfer-read",
             "--from",       endpoint,      "--in-flight", std::to_string(args.in_flight),
             "--timeout-ms", "600000",      "--repeat",    std::to_string(kRepeat),
             "--verify",     args.verify};
  if (ucx_get) ro.argv.push_back("--ucx-get");
  enc.add_to(ro.argv);
  ro.extra_env = extra_env;
  SLUICE_ASSIGN_OR_RETURN(auto reader, Subprocess::spawn(ro));
  auto out = reader->read_line(kRunTimeout);
  while (out.is_ok() && out->rfind("{", 0) != 0)
    out = reader->read_line(kRunTimeout);
  auto code = reader->wait(kExitWait);
  if (!out.is_ok()) return out.status().with_context("reader");
  if (!code.is_ok() || *code != 0) return internal_error("reader failed: " + *out);
  auto j = nlohmann::json::parse(*out, nullptr, false);
  if (j.is_discarded()) return internal_error("reader printed '" + *out + "'");
  return j;
}

constexpr int kRounds = 3;
// Largest region that ucx_perftest also reads as one GET.
constexpr std::uint64_t kRegionPerftestMax = std::uint64_t{4} << 30;

// The ceiling for a same-host read of distinct memory: one thread's memcpy of `bytes` between
// two buffers of that size, best of three (first touch excluded).
double memcpy_gbps(std::uint64_t bytes) {
  std::vector<std::uint8_t> a(bytes, 1), b(bytes, 2);
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(bytes) / s / 1e9);
  }
  return best;
}

int free_port() {
  std::mt19937 rng(static_cast<unsigned>(::getpid()) ^
                   static_cast<unsigned>(Clock::now().time_since_epoch().count()));
  return 20000 + static_cast<int>(rng() % 20000);
}

// Runs ucx_perftest's ucp_get bandwidth test between a server and a client process on loopback
// and returns the overall bandwidth in GB/s (perftest reports MB/s with MB = 2^20 bytes).
Result<double> perftest_get(const std::vector<std::string>& extra_env, std::uint64_t chunk,
                            std::uint64_t bytes) {
  std::uint64_t iters = std::max<std::uint64_t>(1, bytes / chunk);
  std::uint64_t warmup = std::max<std::uint64_t>(2, iters / 16);
  for (int attempt = 0; attempt < 5; ++attempt) {
    int port = free_port();
    Subprocess::Options so;
    so.argv = {"/usr/bin/ucx_perftest", "-p", std::to_string(port)};
    so.extra_env = extra_env;
    so.stderr_to_stdout = true;
    SLUICE_ASSIGN_OR_RETURN(auto server, Subprocess::spawn(so));
    std::this_thread::sleep_for(kPerftestListen);
    Subprocess::Options co;
    co.argv = {"/usr/bin/ucx_perftest",
               "127.0.0.1",
               "-p",
               std::to_string(port),
               "-t",
               "ucp_get",
               "-s",
               std::to_string(chunk),
               "-n",
               std::to_string(iters),
               "-w",
               std::to_string(warmup)};
    co.extra_env = extra_env;
    co.stderr_to_stdout = true;
    SLUICE_ASSIGN_OR_RETURN(auto client, Subprocess::spawn(co));
    std::string text = client->read_all(kRunTimeout);
    auto code = client->wait(kExitWait);
    server->signal(SIGTERM).ignore();
    server->wait(kPerftestExit).ignore();
    auto at = text.find("Final:");
    if (code.is_ok() && *code == 0 && at != std::string::npos) {
      std::istringstream in(text.substr(at + 6));
      double iters_done, lat50, lat_avg, lat_all, bw_avg, bw_all;
      if (in >> iters_done >> lat50 >> lat_avg >> lat_all >> bw_avg >> bw_all) {
        return bw_all * 1048576.0 / 1e9;
      }
    }
    // Its out-of-band socket can lose a race for the port (another process took it between
    // free_port() and the server's bind, or the client reached someone else's server): try
    // again on another port.
    if (text.find("Connection refused") == std::string::npos &&
        text.find("Address already in use") == std::string::npos &&
        text.find("Connection reset by peer") == std::string::npos) {
      return internal_error("ucx_perftest failed: " + text.substr(0, 2000));
    }
  }
  return unavailable("ucx_perftest could not connect after 5 attempts");
}

void print_table(const std::vector<Row>& rows) {
  std::printf("%-9s %4s %10s %10s %9s %9s %14s %16s %12s %12s %14s %13s %10s\n", "transport", "enc",
              "bytes", "chunk", "seconds", "GB/s", "perftest GB/s", "sluice/perftest",
              "first read s", "memcpy GB/s", "1-GET perftest", "sluice/1-GET", "CPU s/GiB");
  for (const auto& r : rows) {
    // The 1-GET columns stay "-" where that run was skipped or failed (see the loop below).
    std::string region = "-", region_ratio = "-";
    if (r.perftest_region_gbps > 0) {
      region = fmt::format("{:.3f}", r.perftest_region_gbps);
      region_ratio = fmt::format("{:.3f}", r.region_ratio());
    }
    std::string cpu = r.cpu_per_gib > 0 ? fmt::format("{:.3f}", r.cpu_per_gib) : "-";
    std::printf("%-9s %4s %10s %10s %9.3f %9.3f %14.3f %16.3f %12.3f %12.3f %14s %13s %10s%s\n",
                r.transport.c_str(), r.encryption.c_str(), format_bytes(r.bytes).c_str(),
                format_bytes(r.chunk).c_str(), r.seconds, r.gbps, r.perftest_gbps, r.ratio(),
                r.cold_seconds, r.memcpy_gbps, region.c_str(), region_ratio.c_str(), cpu.c_str(),
                r.note.c_str());
  }
  const Row* clear = nullptr;
  const Row* encrypted = nullptr;
  for (const auto& r : rows) {
    if (r.transport == "tcp" && r.encryption == "off") clear = &r;
    if (r.transport == "tcp" && r.encryption == "on") encrypted = &r;
  }
  if (clear && encrypted && clear->gbps > 0) {
    std::printf(
        "encrypted/clear (tcp chunk streams): %.3fx the throughput; CPU s/GiB %.3f clear, "
        "%.3f encrypted (reader and source together)\n",
        encrypted->gbps / clear->gbps, clear->cpu_per_gib, encrypted->cpu_per_gib);
  }
  std::printf(
      "seconds and GB/s: best of %d rounds of three reads of the whole region from one "
      "holder; perftest: best of %d runs, alternating with sluice's; first read s: the "
      "very first read, mapping the holder's memory included; memcpy: one thread copying "
      "the same number of distinct bytes in this process, for scale (a same-host sluice "
      "read copies on two threads; ucx_perftest re-reads one chunk-sized buffer, which can "
      "stay in cache); 1-GET perftest: ucx_perftest reading the whole region as one GET, the "
      "same distinct bytes as sluice's read (best of %d runs); enc: chunk stream encryption "
      "(tcp); CPU s/GiB: CPU seconds of the reader (its timed reads) and the source (while the "
      "reader ran) per GiB read, all rounds\n",
      kRounds, kRounds, kRounds);
}

// Reads from one and from two sources that sit in emulated hosts behind rate-limited links
// (network namespaces joined by a bridge, tc tbf on every source link; the reader's link is left
// unlimited so that it is not the bottleneck), and prints the speedup.
int bench_two_sources(const BenchTransferArgs& args, const std::vector<std::string>& env,
                      std::uint64_t size) {
  if (::geteuid() != 0) {
    std::fprintf(stderr, "bench transfer: --link-rate needs root (network namespaces and tc)\n");
    return 1;
  }
  std::string emu = find_emuhosts(env);
  if (emu.empty()) {
    std::fprintf(stderr, "bench transfer: cannot find scripts/emuhosts.sh (set SLUICE_EMUHOSTS)\n");
    return 1;
  }
  const std::string prefix = "sluice-bt";
  const std::string exe = self_exe();
  Status up = run_capture({emu, "up", "3", "--rate", args.link_rate, "--host-rate", "2=none",
                           "--prefix", prefix},
                          {}, kHostsUpTimeout, true)
                  .status();
  if (!up.is_ok()) {
    std::fprintf(stderr, "bench transfer: %s\n", up.to_string().c_str());
    return 1;
  }
  int rc = 0;
  std::vector<nlohmann::json> rows;
  {
    std::vector<std::unique_ptr<Subprocess>> sources;
    std::vector<std::string> endpoints;
    for (int h = 0; h < 2 && rc == 0; ++h) {
      Subprocess::Options so;
      so.argv = in_emulated_host(emu, prefix, h);
      so.argv.insert(so.argv.end(), {exe, "--log-level", "warn", "transfer-source", "--listen",
                                     "tcp://198.18.0." + std::to_string(h + 1) + ":*", "--bytes",
                                     std::to_string(size), "--chunk", args.chunk});
      so.extra_env = kEmulatedHostUcxEnv;
      auto src = start_ready(so, "endpoint ", kSourceStartTimeout,
                             "the source in host " + std::to_string(h));
      if (!src.is_ok()) {
        std::fprintf(stderr, "bench transfer: %s\n", src.status().to_string().c_str());
        rc = 1;
        break;
      }
      endpoints.push_back(src->line.substr(9));
      sources.push_back(std::move(src->proc));
    }
    for (unsigned n = 1; n <= 2 && rc == 0; ++n) {
      if (!args.json) std::fprintf(stderr, "bench transfer: reading from %u source(s)...\n", n);
      Subprocess::Options ro;
      ro.argv = in_emulated_host(emu, prefix, 2);
      ro.argv.insert(ro.argv.end(),
                     {exe, "--log-level", "warn", "transfer-read", "--in-flight",
                      std::to_string(args.in_flight), "--timeout-ms", "600000", "--from"});
      for (unsigned i = 0; i < n; ++i)
        ro.argv.push_back(endpoints[i]);
      ro.extra_env = kEmulatedHostUcxEnv;
      auto rd = start_ready(ro, "{", kRunTimeout, "the reader");
      auto code = rd.is_ok() ? rd->proc->wait(kExitWait) : core::Result<int>(rd.status());
      if (!rd.is_ok() || !code.is_ok() || *code != 0) {
        std::fprintf(stderr, "bench transfer: reader from %u source(s) failed: %s\n", n,
                     rd.is_ok() ? rd->line.c_str() : rd.status().to_string().c_str());
        rc = 1;
        break;
      }
      auto j = nlohmann::json::parse(rd->line, nullptr, false);
      if (j.is_discarded()) {
        rc = 1;
        break;
      }
      nlohmann::json row;
      row["sources"] = n;
      row["link_rate"] = args.link_rate;
      row["bytes"] = j["bytes"];
      row["chunk_bytes"] = parse_bytes(args.chunk).value_or(0);
      row["seconds"] = j["seconds"];
      row["gbps"] = j["gbps"];
      row["bytes_per_source"] = j["bytes_per_source"];
      rows.push_back(row);
    }
    for (auto& s : sources)
      s->signal(SIGTERM).ignore();
    for (auto& s : sources)
      s->wait(kExitWait).ignore();
  }
  run_capture({emu, "down", "--prefix", prefix}, {}, kTwoSourcesDownTimeout, true)
      .status()
      .ignore();
  if (rc != 0 || rows.size() != 2) return rc == 0 ? 1 : rc;
  double speedup = rows[0]["seconds"].get<double>() / rows[1]["seconds"].get<double>();
  rows[1]["speedup"] = speedup;
  if (args.json) {
    for (const auto& r : rows)
      std::printf("%s\n", r.dump().c_str());
    return 0;
  }
  std::printf("%-8s %10s %10s %10s %9s %9s\n", "sources", "link", "bytes", "chunk", "seconds",
              "GB/s");
  for (const auto& r : rows) {
    std::printf("%-8u %10s %10s %10s %9.3f %9.3f\n", r["sources"].get<unsigned>(),
                args.link_rate.c_str(), format_bytes(r["bytes"].get<std::uint64_t>()).c_str(),
                args.chunk.c_str(), r["seconds"].get<double>(), r["gbps"].get<double>());
  }
  std::printf("two sources / one source: %.2fx faster%s\n", speedup,
              speedup >= 1.7 ? " (>= 1.7x)" : " (below 1.7x)");
  return 0;
}

// --memory cuda: for each transport, one reader process pulls the region into host memory (the
// link), copies it from pinned host memory to the GPU, and pulls it into GPU memory, in
// alternating rounds (bench/transfer_device.cpp); the pull into the GPU should run at the slower of
// the other two (>= 0.9 of it). With --fanout and two or more GPUs, also NCCL's fan-out.
int bench_device(const BenchTransferArgs& args, const std::vector<std::string>& env,
                 std::uint64_t size) {
  const CudaDevices gpus = cuda_devices();
  if (gpus.count == 0) {
    std::fprintf(stderr, "bench transfer: --memory cuda: no CUDA device present (%s); skipped\n",
                 gpus.why_none.c_str());
    return kExitNoDevice;
  }
  std::vector<nlohmann::json> rows;
  for (const auto& t : split_commas(args.transports)) {
    const bool ucx_get = t == "tcp-ucx";
    auto extra = transport_env(ucx_get ? "tcp" : t, env);
    if (!args.json)
      std::fprintf(stderr, "bench transfer: %s: pulling into GPU memory...\n", t.c_str());
    auto source = start_source(extra, args, size, ucx_get);
    if (!source.is_ok()) {
      std::fprintf(stderr, "bench transfer: %s: %s\n", t.c_str(),
                   source.status().to_string().c_str());
      return 1;
    }
    Subprocess::Options ro;
    ro.argv = {self_exe(),     "--log-level",
               "warn",         "transfer-read",
               "--from",       (*source)->endpoint,
               "--in-flight",  std::to_string(args.in_flight),
               "--timeout-ms", "600000",
               "--repeat",     "3",
               "--memory",     "cuda"};
    if (args.fanout) ro.argv.push_back("--fanout");
    if (ucx_get) ro.argv.push_back("--ucx-get");
    ro.extra_env = extra;
    auto reader = Subprocess::spawn(ro);
    if (!reader.is_ok()) {
      std::fprintf(stderr, "bench transfer: %s: %s\n", t.c_str(),
                   reader.status().to_string().c_str());
      return 1;
    }
    auto out = (*reader)->read_line(kRunTimeout);
    while (out.is_ok() && out->rfind("{", 0) != 0)
      out = (*reader)->read_line(kRunTimeout);
    auto code = (*reader)->wait(kDeviceReaderExit);
    if (code.is_ok() && *code == kExitNoDevice) return kExitNoDevice;  // it said why
    nlohmann::json j;
    if (out.is_ok()) j = nlohmann::json::parse(*out, nullptr, false);
    if (!out.is_ok() || j.is_discarded() || !code.is_ok() || (*code != 0 && *code != 1)) {
      std::fprintf(stderr, "bench transfer: %s: the reader failed: %s\n", t.c_str(),
                   out.is_ok() ? out->c_str() : out.status().to_string().c_str());
      return 1;
    }
    j["transport"] = t;
    rows.push_back(j);
    if (args.json) {
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
  }
  bool equal = true;
  for (const auto& r : rows) {
    equal = equal && r["device_bytes_equal"].get<bool>() &&
            (r["fanout_bytes_equal"].is_null() || r["fanout_bytes_equal"].get<bool>());
  }
  if (!args.json) {
    std::printf("%-9s %10s %10s %7s %10s %9s %12s %14s %7s %6s %12s\n", "transport", "bytes",
                "chunk", "path", "link GB/s", "H2D GB/s", "device GB/s", "device/slower", "tail s",
                "equal", "fanout GB/s");
    for (const auto& r : rows) {
      const double ratio = r["ratio"].get<double>();
      std::string fanout = r["fanout_gbps"].is_null()
                               ? std::string(r.contains("fanout_note") ? "-" : "")
                               : fmt::format("{:.3f}", r["fanout_gbps"].get<double>());
      std::printf("%-9s %10s %10s %7s %10.3f %9.3f %12.3f %14.3f %7.3f %6s %12s%s\n",
                  r["transport"].get<std::string>().c_str(),
                  format_bytes(r["bytes"].get<std::uint64_t>()).c_str(),
                  format_bytes(r["chunk_bytes"].get<std::uint64_t>()).c_str(),
                  r["path"].get<std::string>().c_str(), r["link_gbps"].get<double>(),
                  r["h2d_gbps"].get<double>(), r["device_gbps"].get<double>(), ratio,
                  r["tail_seconds"].get<double>(),
                  r["device_bytes_equal"].get<bool>() ? "yes" : "NO", fanout.c_str(),
                  ratio >= 0.9 ? "  (>= 0.9 of the slower)" : "  (below 0.9 of the slower)");
      if (r.contains("fanout_note"))
        std::printf("  fanout: %s\n", r["fanout_note"].get<std::string>().c_str());
    }
    std::printf(
        "link: a pull into host memory; H2D: a copy of the same bytes from pinned host memory to "
        "GPU 0; device: a pull into GPU 0 (path staged: through pinned host memory, each chunk "
        "copied on as soon as it is verified; direct: UCX into GPU memory); device/slower: "
        "device over the slower of link and H2D; tail s: after the last chunk, waiting for the "
        "last copies; equal: GPU bytes match every chunk checksum; fanout: NCCL broadcast from "
        "GPU 0 to the other %d GPU(s). Best of 3 alternating rounds each.\n",
        gpus.count - 1);
  }
  return equal ? 0 : 1;
}

// One row: the sluice reader against ucx_perftest over `t` (tcp, tcp-ucx or sm) with
// `enc_setting` ("-": not a chunk stream), kRounds rounds alternating the two, each side's best
// round. Nothing when a step failed (said on stderr).
std::optional<Row> measure_row(const BenchTransferArgs& args, const std::vector<std::string>& env,
                               const std::string& t, const std::string& enc_setting,
                               const std::string& keys, std::uint64_t size, std::uint64_t chunk) {
  Encryption enc;
  if (enc_setting != "-") enc = {keys, enc_setting};
  const std::string label = enc_setting == "-" ? t : t + " (encryption " + enc_setting + ")";
  // tcp reads go over chunk streams; tcp-ucx over UCX's GET, as before them (one GET in
  // flight with UCX 1.13, see get_window() in wire/transfer_source.cpp).
  const bool ucx_get = t == "tcp-ucx";
  auto extra = transport_env(ucx_get ? "tcp" : t, env);
  if (!args.json) std::fprintf(stderr, "bench transfer: %s: sluice reader...\n", label.c_str());
  // Rounds alternate sluice and ucx_perftest, so that both see the same machine (these
  // machines are shared and noisy); each side's best round is reported.
  auto source = start_source(extra, args, size, ucx_get, enc);
  if (!source.is_ok()) {
    std::fprintf(stderr, "bench transfer: %s: %s\n", t.c_str(),
                 source.status().to_string().c_str());
    return std::nullopt;
  }
  std::optional<nlohmann::json> best;
  double best_perftest = 0, best_region = 0;
  // ucx_perftest reading the whole region as one GET needs a buffer of the region's size in
  // each of its two processes, on top of sluice's two: left out above kRegionPerftestMax, and
  // after a failure (reported; the rest of the row stands).
  bool region_perftest = size <= kRegionPerftestMax;
  if (!region_perftest && !args.json)
    std::fprintf(stderr, "bench transfer: %s: no 1-GET perftest above %s\n", t.c_str(),
                 format_bytes(kRegionPerftestMax).c_str());
  double cold = 0;
  double cpu_seconds = 0;
  std::uint64_t cpu_bytes = 0;
  for (int round = 0; round < kRounds; ++round) {
    if (!args.json)
      std::fprintf(stderr, "bench transfer: %s: round %d of %d\n", t.c_str(), round + 1, kRounds);
    const double source_cpu0 = process_cpu_seconds((*source)->proc->pid());
    auto r = sluice_read(extra, args, (*source)->endpoint, ucx_get, enc);
    if (!r.is_ok()) {
      std::fprintf(stderr, "bench transfer: %s: %s\n", label.c_str(),
                   r.status().to_string().c_str());
      return std::nullopt;
    }
    cpu_seconds += process_cpu_seconds((*source)->proc->pid()) - source_cpu0;
    cpu_seconds += r->value("cpu_seconds", 0.0);
    cpu_bytes += kRepeat * (*r)["bytes"].get<std::uint64_t>();
    if (round == 0) cold = (*r)["all_seconds"][0].get<double>();
    if (!best || (*r)["seconds"].get<double>() < (*best)["seconds"].get<double>()) best = *r;
    auto p = perftest_get(extra, chunk, size);
    if (!p.is_ok()) {
      std::fprintf(stderr, "bench transfer: %s: %s\n", t.c_str(), p.status().to_string().c_str());
      return std::nullopt;
    }
    best_perftest = std::max(best_perftest, *p);
    if (region_perftest) {
      auto whole = perftest_get(extra, size, size);
      if (whole.is_ok()) {
        best_region = std::max(best_region, *whole);
      } else {
        std::fprintf(stderr, "bench transfer: %s: 1-GET perftest left out: %s\n", t.c_str(),
                     whole.status().to_string().c_str());
        region_perftest = false;
        best_region = 0;
      }
    }
  }
  auto* r = &*best;
  auto* p = &best_perftest;
  Row row;
  row.transport = t;
  row.bytes = (*r)["bytes"].get<std::uint64_t>();
  row.chunk = chunk;
  row.seconds = (*r)["seconds"].get<double>();
  row.cold_seconds = cold;
  row.memcpy_gbps = memcpy_gbps(size);
  row.gbps = (*r)["gbps"].get<double>();
  row.perftest_gbps = *p;
  row.perftest_region_gbps = best_region;
  if (enc_setting != "-") {
    row.encryption = enc_setting;
    row.cpu_per_gib =
        cpu_bytes > 0 ? cpu_seconds / (static_cast<double>(cpu_bytes) / (1 << 30)) : 0.0;
  }
  row.note = row.ratio() >= 0.95 ? "  (>= 0.95 of perftest)" : "  (below 0.95 of perftest)";
  return row;
}

void print_row_json(const Row& row) {
  nlohmann::json j;
  j["transport"] = row.transport;
  j["bytes"] = row.bytes;
  j["chunk_bytes"] = row.chunk;
  j["seconds"] = row.seconds;
  j["gbps"] = row.gbps;
  j["perftest_gbps"] = row.perftest_gbps;
  j["ratio"] = row.ratio();
  if (row.perftest_region_gbps > 0) {
    j["perftest_region_gbps"] = row.perftest_region_gbps;
    j["ratio_region"] = row.region_ratio();
  } else {
    j["perftest_region_gbps"] = nullptr;
    j["ratio_region"] = nullptr;
  }
  j["cold_seconds"] = row.cold_seconds;
  j["memcpy_gbps"] = row.memcpy_gbps;
  j["encryption"] = row.encryption;
  j["cpu_seconds_per_gib"] = row.cpu_per_gib;
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

}  // namespace

int run_bench_transfer(const BenchTransferArgs& args, const std::vector<std::string>& env) {
  auto size = parse_bytes(args.size);
  auto chunk = parse_bytes(args.chunk);
  if (!size.is_ok() || !chunk.is_ok() || *size == 0 || *chunk == 0) {
    std::fprintf(stderr, "bench transfer: %s\n",
                 (!size.is_ok() ? size.status() : chunk.status()).to_string().c_str());
    return 2;
  }
  if (args.sources != 1 && args.sources != 2) {
    std::fprintf(stderr, "bench transfer: --sources must be 1 or 2\n");
    return 2;
  }
  if (args.memory != "host" && args.memory != "cuda") {
    std::fprintf(stderr, "bench transfer: --memory must be host or cuda, not '%s'\n",
                 args.memory.c_str());
    return 2;
  }
  if (args.fanout && args.memory != "cuda") {
    std::fprintf(stderr, "bench transfer: --fanout goes with --memory cuda\n");
    return 2;
  }
  if (args.memory == "cuda" && (args.sources != 1 || !args.link_rate.empty())) {
    std::fprintf(stderr, "bench transfer: --memory cuda reads from one source on this host\n");
    return 2;
  }
  if (args.sources == 2 || !args.link_rate.empty()) {
    if (args.sources != 2 || args.link_rate.empty()) {
      std::fprintf(stderr, "bench transfer: --sources 2 goes with --link-rate RATE (e.g. 1gbit)\n");
      return 2;
    }
    return bench_two_sources(args, env, *size);
  }
  auto transports = split_commas(args.transports);
  for (const auto& t : transports) {
    if (t != "tcp" && t != "sm" && t != "tcp-ucx") {
      std::fprintf(stderr, "bench transfer: unknown transport '%s' (tcp, tcp-ucx or sm)\n",
                   t.c_str());
      return 2;
    }
  }
  if (args.memory == "cuda") return bench_device(args, env, *size);
  auto encryptions = split_commas(args.encryption);
  for (const auto& e : encryptions) {
    if (e != "off" && e != "on") {
      std::fprintf(stderr, "bench transfer: --encryption takes off and on, not '%s'\n", e.c_str());
      return 2;
    }
  }
  if (encryptions.empty()) encryptions = {"off"};
  // Keys for encrypted rows, as a job has them: the source is the actor, the reader rollout-0.
  std::string keys;
  struct RemoveKeys {
    std::string dir;
    ~RemoveKeys() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } remove_keys;
  if (std::find(encryptions.begin(), encryptions.end(), "on") != encryptions.end()) {
    keys = (std::filesystem::temp_directory_path() /
            ("sluice-bench-transfer-keys-" + std::to_string(::getpid())))
               .string();
    auto made = make_job_keys(keys, {{"actor", kRoleActor}, {"rollout-0", kRoleRollout}});
    if (!made.is_ok()) {
      std::fprintf(stderr, "bench transfer: %s\n", made.status().to_string().c_str());
      return 1;
    }
    remove_keys.dir = keys;
  }
  std::vector<std::pair<std::string, std::string>> plan;  // (transport, encryption)
  for (const auto& t : transports) {
    if (t != "tcp") {
      plan.emplace_back(t, "-");  // not a chunk stream: nothing to encrypt
      continue;
    }
    for (const auto& e : encryptions)
      plan.emplace_back(t, e);
  }
  std::vector<Row> rows;
  for (const auto& [t, enc_setting] : plan) {
    auto row = measure_row(args, env, t, enc_setting, keys, *size, *chunk);
    if (!row) return 1;
    rows.push_back(*row);
    if (args.json) print_row_json(*row);
  }
  if (!args.json) print_table(rows);
  return 0;
}

}  // namespace sluice::cli
