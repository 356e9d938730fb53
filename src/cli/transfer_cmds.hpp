// `sluice transfer-source`, `sluice transfer-read` (processes the transfer bench and tests start)
// and `sluice bench transfer`.
#pragma once

#include <string>
#include <vector>

namespace sluice::cli {

struct TransferSourceArgs {
  std::string listen = "tcp://127.0.0.1:*";
  std::string bytes = "64MiB";
  std::string chunk = "8MiB";
  std::string name = "bench";
  std::uint64_t seed = 1;
  long corrupt_chunk =
      -1;                // fault injection for tests: flip a byte of this chunk after checksumming
  bool ucx_get = false;  // serve no chunk stream: tcp readers use UCX's GET (for comparison)
};

struct TransferReadArgs {
  std::vector<std::string> from;  // control endpoints of the sources
  std::string name = "bench";
  unsigned in_flight = 8;
  int timeout_ms = 120000;
  int op_timeout_ms = 10000;
  bool warmup = true;
  unsigned repeat = 1;  // timed reads of the whole region; the JSON reports each and the best
  std::uint64_t verify_seed = 0;  // when non-zero: compare every byte with the seeded pattern
  bool ucx_get = false;           // read over UCX's GET even where a chunk stream is offered
};

struct BenchTransferArgs {
  std::string transports = "tcp,sm";
  std::string size = "1GiB";
  std::string chunk = "8MiB";
  unsigned in_flight = 8;
  unsigned sources = 1;
  std::string link_rate;  // e.g. "500mbit": sources in emulated hosts behind rate-limited links
  bool json = false;
};

int run_transfer_source(const TransferSourceArgs& args, const std::vector<std::string>& env);
int run_transfer_read(const TransferReadArgs& args, const std::vector<std::string>& env);
int run_bench_transfer(const BenchTransferArgs& args, const std::vector<std::string>& env);

}  // namespace sluice::cli
