// `sluice bench broadcast` (and `bench broadcast-run`, the part that runs inside an emulated host).
#pragma once

#include <string>
#include <vector>

namespace sluice::cli {

struct BenchBroadcastArgs {
  unsigned relays = 8;
  std::string size = "64MiB";
  std::string chunk = "1MiB";
  std::string link_rate = "1gbit";
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
