// `sluice transfer-read --memory cuda`: the reading side of `sluice bench transfer --memory cuda`.
#pragma once

#include <vector>

#include "bench/transfer_args.hpp"
#include "core/event_loop.hpp"
#include "wire/region_server.hpp"
#include "wire/transfer.hpp"

namespace sluice::cli {

// Times, in alternating rounds, a pull into host memory (the link), a pinned host-to-device copy
// of the same bytes, and a pull into device memory; checks the device copy against the region's
// checksums; with args.fanout and two or more GPUs, also an NCCL broadcast of it to the other
// GPUs. Prints one JSON object. Returns 0, 1 on failure, kExitNoDevice without a CUDA device.
int read_into_device_bench(const TransferReadArgs& args, core::EventLoop& loop,
                           core::TransferEngine& engine,
                           const std::vector<core::ReadSource>& sources,
                           const core::RegionLayout& layout, core::RegisteredBuffer& staging);

}  // namespace sluice::cli
