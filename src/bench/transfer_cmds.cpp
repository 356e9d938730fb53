#include "bench/transfer_cmds.hpp"

#include "bench/transfer_device.hpp"

#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/checksum.hpp"
#include "core/event_loop.hpp"
#include "core/log.hpp"
#include "core/units.hpp"
#include "wire/messaging.hpp"
#include "wire/region_server.hpp"
#include "wire/transfer.hpp"

namespace sluice::cli {

using namespace sluice::core;

namespace {

// A transfer source describes its region within this (it answers from memory).
constexpr Millis kDescribeTimeout{10000};

// A bench helper's chunk stream settings: `encryption` with `identity`'s key from the job keys
// in `keys` (none: clear only, and "on" is refused).
Status bench_stream_security(TransferOptions& to, const std::string& keys,
                             const std::string& identity, const std::string& encryption) {
  Security security = Security::plain();
  if (!keys.empty()) {
    SecurityConfig sc;
    sc.key_file = key_file_path(keys, identity);
    sc.members_file = members_file_path(keys);
    SLUICE_ASSIGN_OR_RETURN(security, load_security(sc, identity));
  }
  return set_stream_security(to, encryption, "", security, identity);
}

double process_cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

}  // namespace

int run_transfer_source(const TransferSourceArgs& args, const std::vector<std::string>& env) {
  log::set_process_name("transfer-source");
  auto bytes = parse_bytes(args.bytes);
  auto chunk = parse_bytes(args.chunk);
  if (!bytes.is_ok() || !chunk.is_ok() || *bytes == 0 || *chunk == 0) {
    std::fprintf(stderr, "transfer-source: %s\n",
                 (!bytes.is_ok() ? bytes.status() : chunk.status()).to_string().c_str());
    return 2;
  }
  auto loop = EventLoop::create().value();
  loop->handle_shutdown_signals();
  TransferOptions topts;
  topts.environment = env;
  topts.tcp_stream = !args.ucx_get;
  // Its readers reach it where its control endpoint listens (an emulated host's address in the
  // multi-source bench): the chunk server binds there too.
  topts.stream_reach = args.listen;
  if (auto st = bench_stream_security(topts, args.keys, "actor", args.encryption); !st.is_ok()) {
    std::fprintf(stderr, "transfer-source: %s\n", st.to_string().c_str());
    return 2;
  }
  auto engine = TransferEngine::create(*loop, topts);
  if (!engine.is_ok()) {
    std::fprintf(stderr, "transfer-source: %s\n", engine.status().to_string().c_str());
    return 1;
  }
  auto buf = (*engine)->allocate(*bytes, false);
  if (!buf.is_ok()) {
    std::fprintf(stderr, "transfer-source: %s\n", buf.status().to_string().c_str());
    return 1;
  }
  fill_pseudo_random((*buf)->data(), *bytes, args.seed);
  auto layout = make_layout(args.name, (*buf)->data(), *bytes, *chunk);
  if (!layout.is_ok()) {
    std::fprintf(stderr, "transfer-source: %s\n", layout.status().to_string().c_str());
    return 2;
  }
  if (args.corrupt_chunk >= 0) {
    auto k = static_cast<std::uint64_t>(args.corrupt_chunk);
    if (k >= layout->chunk_count()) {
      std::fprintf(stderr, "transfer-source: --corrupt-chunk %ld: only %llu chunks\n",
                   args.corrupt_chunk, static_cast<unsigned long long>(layout->chunk_count()));
      return 2;
    }
    (*buf)->data()[layout->chunk_offset(k) + layout->chunk_size(k) / 2] ^= 0x5a;
    log::warn("transfer-source: chunk {} corrupted on purpose (fault injection)", k);
  }
  // transfer-source and transfer-read are benchmark helpers that a bench starts on loopback and
  // that serve generated test data: plain, said so.
  auto server = Server::create(*loop, args.listen, core::Security::plain());
  if (!server.is_ok()) {
    std::fprintf(stderr, "transfer-source: %s\n", server.status().to_string().c_str());
    return 1;
  }
  auto regions = RegionServer::create(**server).value();
  // The bytes are the ones this source made, unless it corrupted one on purpose: then its copy
  // is not verified, and says so.
  Status s = regions->expose(**buf, std::move(layout).value(), args.corrupt_chunk < 0);
  if (!s.is_ok()) {
    std::fprintf(stderr, "transfer-source: %s\n", s.to_string().c_str());
    return 1;
  }
  loop->on_shutdown([&](int) { loop->stop(); });
  std::printf("endpoint %s\n", (*server)->endpoint().c_str());
  std::fflush(stdout);
  loop->run().ignore();
  regions.reset();
  return 0;
}

int run_transfer_read(const TransferReadArgs& args, const std::vector<std::string>& env) {
  log::set_process_name("transfer-read");
  if (args.from.empty()) {
    std::fprintf(stderr, "transfer-read: --from needs at least one endpoint\n");
    return 2;
  }
  if (args.memory != "host" && args.memory != "cuda") {
    std::fprintf(stderr, "transfer-read: --memory must be host or cuda, not '%s'\n",
                 args.memory.c_str());
    return 2;
  }
  auto loop = EventLoop::create().value();
  TransferOptions topts;
  topts.environment = env;
  topts.tcp_stream = !args.ucx_get;
  // digest-all: every chunk by its digest, even from a verified copy of this user on this host.
  topts.trust_same_user = args.verify != "digest-all";
  if (auto st = bench_stream_security(topts, args.keys, "rollout-0", args.encryption);
      !st.is_ok()) {
    std::fprintf(stderr, "transfer-read: %s\n", st.to_string().c_str());
    return 2;
  }
  auto engine_r = TransferEngine::create(*loop, topts);
  if (!engine_r.is_ok()) {
    std::fprintf(stderr, "transfer-read: %s\n", engine_r.status().to_string().c_str());
    return 1;
  }
  auto& engine = **engine_r;
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<ReadSource> sources;
  std::optional<RegionLayout> layout;
  for (const auto& ep : args.from) {
    auto c = Client::create(*loop, ep, core::Security::plain());
    if (!c.is_ok()) {
      std::fprintf(stderr, "transfer-read: %s\n", c.status().to_string().c_str());
      return 2;
    }
    auto region = describe_region(**c, args.name, kDescribeTimeout);
    if (!region.is_ok()) {
      std::fprintf(stderr, "transfer-read: %s\n", region.status().to_string().c_str());
      return 1;
    }
    if (layout && layout->checksums != region->layout.checksums) {
      std::fprintf(stderr, "transfer-read: %s holds a different '%s' than %s\n", ep.c_str(),
                   args.name.c_str(), args.from[0].c_str());
      return 1;
    }
    layout = region->layout;
    sources.push_back({ep, region->descriptor});
    clients.push_back(std::move(c).value());
  }
  auto dst = engine.allocate(layout->bytes, true);
  if (!dst.is_ok()) {
    std::fprintf(stderr, "transfer-read: %s\n", dst.status().to_string().c_str());
    return 1;
  }
  if (args.memory == "cuda")
    return read_into_device_bench(args, *loop, engine, sources, *layout, **dst);
  ReadOptions opts;
  opts.max_in_flight_per_source = args.in_flight;
  opts.total_timeout = Millis(args.timeout_ms);
  opts.op_timeout = Millis(args.op_timeout_ms);
  if (args.verify == "checksum") {
    layout->digests.clear();
  } else if (args.verify != "digest" && args.verify != "digest-all") {
    std::fprintf(stderr,
                 "transfer-read: --verify must be digest, digest-all or checksum, not '%s'\n",
                 args.verify.c_str());
    return 2;
  } else if (layout->digests.empty()) {
    std::fprintf(stderr, "transfer-read: the source gave no chunk digests to verify against\n");
    return 1;
  }
  auto chunks = whole_region_chunks(*layout);
  if (args.warmup) {
    // Connection set-up and first-touch costs stay out of the timed read: read one chunk from
    // each source first.
    for (std::uint32_t s = 0; s < sources.size(); ++s) {
      auto first = std::vector<ChunkRead>{chunks[s % chunks.size()]};
      first[0].sources = {s};
      auto w = engine.read_sync(sources, first, **dst, opts);
      if (!w.is_ok()) {
        std::fprintf(stderr, "transfer-read: warm-up: %s\n", w.status().to_string().c_str());
        return 1;
      }
    }
  }
  opts.on_progress = [](const ReadProgress& p) {
    log::debug("transfer-read: {} of {} ({} of {} chunks)", format_bytes(p.bytes_done),
               format_bytes(p.bytes_total), p.chunks_done, p.chunks_total);
  };
  std::optional<ReadStats> best;
  std::vector<double> all_seconds;
  const double cpu0 = process_cpu_seconds();
  for (unsigned rep = 0; rep < std::max(1u, args.repeat); ++rep) {
    auto st = engine.read_sync(sources, chunks, **dst, opts);
    if (!st.is_ok()) {
      std::fprintf(stderr, "transfer-read: %s\n", st.status().to_string().c_str());
      return 1;
    }
    all_seconds.push_back(st->seconds);
    if (!best || st->seconds < best->seconds) best = *st;
  }
  const double cpu_seconds = process_cpu_seconds() - cpu0;
  auto* stats = &*best;
  bool equal = true;
  if (args.verify_seed != 0) {
    std::vector<std::uint8_t> expect(layout->bytes);
    fill_pseudo_random(expect.data(), expect.size(), args.verify_seed);
    equal = std::memcmp(expect.data(), (*dst)->data(), expect.size()) == 0;
  }
  nlohmann::json out;
  out["bytes"] = stats->bytes;
  out["seconds"] = stats->seconds;
  out["gbps"] = stats->seconds > 0 ? static_cast<double>(stats->bytes) / stats->seconds / 1e9 : 0.0;
  out["retries"] = stats->retries;
  out["checksum_failures"] = stats->checksum_failures;
  out["checksum_only_bytes"] = stats->checksum_only_bytes;
  out["owner_unconfirmed"] = stats->owner_unconfirmed;
  out["bytes_per_source"] = stats->bytes_per_source;
  out["failed_sources"] = stats->failed_sources;
  out["all_seconds"] = all_seconds;
  out["cpu_seconds"] = cpu_seconds;
  if (args.verify_seed != 0) out["bytes_equal"] = equal;
  std::printf("%s\n", out.dump().c_str());
  return equal ? 0 : 1;
}

}  // namespace sluice::cli
