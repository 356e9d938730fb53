// Tests' holders and readers over real UCX: a `sluice transfer-source` process serving seeded
// bytes as region "r", and a reader in the test's own process (a loop, a transfer engine on the
// given transports, control clients). SLUICE_BIN names the binary.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/event_loop.hpp"
#include "core/process.hpp"
#include "core/units.hpp"
#include "wire/messaging.hpp"
#include "wire/region_server.hpp"
#include "wire/transfer.hpp"

namespace sluice::testing {

// The environment that keeps UCX to `tls` on loopback.
inline std::vector<std::string> tls_env(const std::string& tls) {
  return {"UCX_TLS=" + tls, "UCX_NET_DEVICES=lo", "UCX_WARN_UNUSED_ENV_VARS=n"};
}

// `bytes` of data seeded by `seed`, served in chunks of `chunk`; chunk `corrupt_chunk` is changed
// after its sums were taken (-1: none). `prefix` runs it under another program (setpriv).
struct TransferSource {
  std::unique_ptr<core::Subprocess> proc;
  std::string endpoint;
  TransferSource(const std::string& tls, std::uint64_t bytes, std::uint64_t chunk,
                 std::uint64_t seed, long corrupt_chunk = -1,
                 std::vector<std::string> prefix = {}) {
    core::Subprocess::Options o;
    o.argv = std::move(prefix);
    const std::vector<std::string> source = {
        SLUICE_BIN, "--log-level",         "warn",    "transfer-source",
        "--bytes",  std::to_string(bytes), "--chunk", std::to_string(chunk),
        "--seed",   std::to_string(seed),  "--name",  "r"};
    o.argv.insert(o.argv.end(), source.begin(), source.end());
    if (corrupt_chunk >= 0) {
      o.argv.push_back("--corrupt-chunk");
      o.argv.push_back(std::to_string(corrupt_chunk));
    }
    o.extra_env = tls_env(tls);
    proc = core::Subprocess::spawn(o).value();
    while (true) {
      auto line = proc->read_line(core::Millis(30000));
      REQUIRE_MESSAGE(line.is_ok(), line.status().to_string());
      if (line->rfind("endpoint ", 0) == 0) {
        endpoint = line->substr(9);
        break;
      }
    }
  }
};

struct SourceReader {
  std::unique_ptr<core::EventLoop> loop = core::EventLoop::create().value();
  std::unique_ptr<core::TransferEngine> engine;
  std::vector<std::unique_ptr<core::Client>> clients;
  explicit SourceReader(const std::string& tls, bool trust_same_user = true) {
    core::TransferOptions o;
    o.ucx_config = {{"TLS", tls}, {"NET_DEVICES", "lo"}};
    o.trust_same_user = trust_same_user;
    auto e = core::TransferEngine::create(*loop, o);
    REQUIRE_MESSAGE(e.is_ok(), e.status().to_string());
    engine = std::move(e).value();
  }
  core::RemoteRegion describe(const TransferSource& s) {
    clients.push_back(core::Client::create(*loop, s.endpoint, core::Security::plain()).value());
    auto r = core::describe_region(*clients.back(), "r", core::Millis(10000));
    REQUIRE_MESSAGE(r.is_ok(), r.status().to_string());
    return std::move(r).value();
  }
};

}  // namespace sluice::testing
