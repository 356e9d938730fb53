// `sluice transfer-source`, `sluice transfer-read` (processes the transfer bench and tests start)
// and `sluice bench transfer`.
#pragma once

#include <string>
#include <vector>

#include "bench/transfer_args.hpp"

namespace sluice::cli {

int run_transfer_source(const TransferSourceArgs& args, const std::vector<std::string>& env);
int run_transfer_read(const TransferReadArgs& args, const std::vector<std::string>& env);
int run_bench_transfer(const BenchTransferArgs& args, const std::vector<std::string>& env);

}  // namespace sluice::cli
