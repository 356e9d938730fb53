// Compiled when CUDA is off or NCCL was not found: there is nothing to fan out with, and create()
// says so.
#include "wire/nccl_fanout.hpp"

namespace sluice::core {

bool nccl_available() {
  return false;
}

struct LocalFanout::Impl {};

Result<std::unique_ptr<LocalFanout>> LocalFanout::create(std::vector<int> /*devices*/) {
  return failed_precondition("local fanout: built without NCCL");
}

LocalFanout::~LocalFanout() = default;

// A LocalFanout cannot be made in this build; this exists for the linker only.
Status LocalFanout::broadcast(const std::vector<void*>& /*buffers*/, std::uint64_t /*bytes*/,
                              std::size_t /*root*/, Millis /*timeout*/) {
  return failed_precondition("local fanout: built without NCCL");
}

}  // namespace sluice::core
