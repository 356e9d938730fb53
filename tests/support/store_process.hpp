// A weight store process for tests: `sluice weightstore` on a free loopback port, its endpoint
// read from its first line. The including test defines SLUICE_BIN (the sluice binary).
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "core/event_loop.hpp"
#include "core/process.hpp"

namespace sluice::testing {

struct StoreProcess {
  std::unique_ptr<core::Subprocess> proc;
  std::string endpoint;
  StoreProcess() {
    proc = core::Subprocess::spawn_argv({SLUICE_BIN, "--log-level", "warn", "weightstore", "--set",
                                         "store.listen=tcp://127.0.0.1:*", "--set",
                                         "store.lease_ttl_ms=60000", "--set",
                                         "store.security.mode=plain"})
               .value();
    while (endpoint.empty()) {
      auto line = proc->read_line(core::Millis(20000));
      REQUIRE_MESSAGE(line.is_ok(), line.status().to_string());
      if (line->rfind("endpoint ", 0) == 0) endpoint = line->substr(9);
    }
  }
};

}  // namespace sluice::testing
