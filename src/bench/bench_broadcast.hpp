// `sluice bench broadcast` (and `bench broadcast-run`, the part that runs inside an emulated host).
#pragma once

#include <string>
#include <vector>

namespace sluice::cli {

struct BenchBroadcastArgs {
  unsigned relays = 8;
  std::string size = "128MiB";
  std::string chunk = "1MiB";
  // 8 relays forwarding at 1 Gbit/s saturate a 2-core machine (the bench then flags its rows
  // CPU-bound); at 250 Mbit/s the links set the pace there.
  std::string link_rate = "250mbit";
  std::string link_latency;  // "" : emuhosts.sh's default
  std::string designs = "chain,tree,direct";
  unsigned fanout = 2;
  bool json = false;
  // broadcast-run only
  std::string design = "chain";
  std::string emuhosts;
  std::string prefix;
};

int run_bench_broadcast(const BenchBroadcastArgs& args, const std::vector<std::string>& env);
int run_bench_broadcast_inside(const BenchBroadcastArgs& args, const std::vector<std::string>& env);

}  // namespace sluice::cli
