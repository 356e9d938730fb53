// `sluice bench transfer`: moves a region between two real processes with sluice's reader and,
// in the same run, with UCX's own ucx_perftest (ucp_get, same message size, same transport and
// settings), and prints both side by side with their ratio.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "cli/transfer_cmds.hpp"
#include "core/log.hpp"
#include "core/event_loop.hpp"
#include "core/process.hpp"
#include "core/units.hpp"

namespace sluice::cli {

using namespace sluice::core;

namespace {

std::string self_exe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "sluice";
  return std::string(buf, static_cast<std::size_t>(n));
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

bool user_set(const std::vector<std::string>& env, const std::string& var) {
  for (const auto& e : env)
    if (e.rfind(var + "=", 0) == 0) return true;
  return false;
}

// The UCX environment for one transport: UCX_TLS from --transport. sluice's own UCX defaults
// are already in this process's environment (main sets them), so sluice's processes and
// ucx_perftest inherit the same settings. What the user set stays as they set it.
std::vector<std::string> transport_env(const std::string& transport,
                                       const std::vector<std::string>& env) {
  std::vector<std::string> out = {"UCX_TLS=" + transport};
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
  std::string note;
};

Result<nlohmann::json> sluice_read(const std::vector<std::string>& extra_env,
                                   const BenchTransferArgs& args, std::uint64_t bytes) {
  const std::string exe = self_exe();
  Subprocess::Options so;
  so.argv = {exe, "transfer-source", "--bytes", std::to_string(bytes), "--chunk", args.chunk};
  so.extra_env = extra_env;
  SLUICE_ASSIGN_OR_RETURN(auto source, Subprocess::spawn(so));
  std::string line;
  while (line.rfind("endpoint ", 0) != 0) {
    SLUICE_ASSIGN_OR_RETURN(line, source->read_line(Millis(120000)));
  }
  std::string endpoint = line.substr(9);

  Subprocess::Options ro;
  ro.argv = {exe, "transfer-read", "--from", endpoint, "--in-flight",
             std::to_string(args.in_flight), "--timeout-ms", "600000"};
  ro.extra_env = extra_env;
  SLUICE_ASSIGN_OR_RETURN(auto reader, Subprocess::spawn(ro));
  auto out = reader->read_line(Millis(600000));
  while (out.is_ok() && out->rfind("{", 0) != 0) out = reader->read_line(Millis(600000));
  auto code = reader->wait(Millis(10000));
  source->signal(SIGTERM).ignore();
  source->wait(Millis(10000)).ignore();
  if (!out.is_ok()) return out.status().with_context("reader");
  if (!code.is_ok() || *code != 0) return internal_error("reader failed: " + *out);
  try {
    return nlohmann::json::parse(*out);
  } catch (const std::exception& e) {
    return internal_error("reader printed '" + *out + "'");
  }
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
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    Subprocess::Options co;
    co.argv = {"/usr/bin/ucx_perftest", "127.0.0.1", "-p", std::to_string(port), "-t", "ucp_get",
               "-s", std::to_string(chunk), "-n", std::to_string(iters), "-w",
               std::to_string(warmup)};
    co.extra_env = extra_env;
    co.stderr_to_stdout = true;
    SLUICE_ASSIGN_OR_RETURN(auto client, Subprocess::spawn(co));
    std::string text = client->read_all(Millis(600000));
    auto code = client->wait(Millis(10000));
    server->signal(SIGTERM).ignore();
    server->wait(Millis(5000)).ignore();
    auto at = text.find("Final:");
    if (code.is_ok() && *code == 0 && at != std::string::npos) {
      std::istringstream in(text.substr(at + 6));
      double iters_done, lat50, lat_avg, lat_all, bw_avg, bw_all;
      if (in >> iters_done >> lat50 >> lat_avg >> lat_all >> bw_avg >> bw_all) {
        return bw_all * 1048576.0 / 1e9;
      }
    }
    if (text.find("Connection refused") == std::string::npos &&
        text.find("Address already in use") == std::string::npos) {
      return internal_error("ucx_perftest failed: " + text.substr(0, 2000));
    }
  }
  return unavailable("ucx_perftest could not connect after 5 attempts");
}

void print_table(const std::vector<Row>& rows) {
  std::printf("%-9s %10s %10s %9s %9s %14s %16s\n", "transport", "bytes", "chunk", "seconds",
              "GB/s", "perftest GB/s", "sluice/perftest");
  for (const auto& r : rows) {
    double ratio = r.perftest_gbps > 0 ? r.gbps / r.perftest_gbps : 0.0;
    std::printf("%-9s %10s %10s %9.3f %9.3f %14.3f %16.3f%s\n", r.transport.c_str(),
                format_bytes(r.bytes).c_str(), format_bytes(r.chunk).c_str(), r.seconds, r.gbps,
                r.perftest_gbps, ratio, r.note.c_str());
  }
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
  if (args.sources == 2 || !args.link_rate.empty()) {
    std::fprintf(stderr, "bench transfer: --sources 2 --link-rate is not part of this build yet\n");
    return 2;
  }
  if (args.sources != 1) {
    std::fprintf(stderr, "bench transfer: --sources must be 1 or 2\n");
    return 2;
  }
  auto transports = split_commas(args.transports);
  for (const auto& t : transports) {
    if (t != "tcp" && t != "sm") {
      std::fprintf(stderr, "bench transfer: unknown transport '%s' (tcp or sm)\n", t.c_str());
      return 2;
    }
  }
  std::vector<Row> rows;
  for (const auto& t : transports) {
    auto extra = transport_env(t, env);
    if (!args.json) std::fprintf(stderr, "bench transfer: %s: sluice reader...\n", t.c_str());
    auto r = sluice_read(extra, args, *size);
    if (!r.is_ok()) {
      std::fprintf(stderr, "bench transfer: %s: %s\n", t.c_str(), r.status().to_string().c_str());
      return 1;
    }
    if (!args.json) std::fprintf(stderr, "bench transfer: %s: ucx_perftest...\n", t.c_str());
    auto p = perftest_get(extra, *chunk, *size);
    if (!p.is_ok()) {
      std::fprintf(stderr, "bench transfer: %s: %s\n", t.c_str(), p.status().to_string().c_str());
      return 1;
    }
    Row row;
    row.transport = t;
    row.bytes = (*r)["bytes"].get<std::uint64_t>();
    row.chunk = *chunk;
    row.seconds = (*r)["seconds"].get<double>();
    row.gbps = (*r)["gbps"].get<double>();
    row.perftest_gbps = *p;
    double ratio = row.perftest_gbps > 0 ? row.gbps / row.perftest_gbps : 0.0;
    row.note = ratio >= 0.95 ? "  (>= 0.95 of perftest)" : "  (below 0.95 of perftest)";
    rows.push_back(row);
    if (args.json) {
      nlohmann::json j;
      j["transport"] = row.transport;
      j["bytes"] = row.bytes;
      j["chunk_bytes"] = row.chunk;
      j["seconds"] = row.seconds;
      j["gbps"] = row.gbps;
      j["perftest_gbps"] = row.perftest_gbps;
      j["ratio"] = ratio;
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
  }
  if (!args.json) print_table(rows);
  return 0;
}

}  // namespace sluice::cli
