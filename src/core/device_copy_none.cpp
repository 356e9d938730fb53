// Compiled when SLUICE_ENABLE_CUDA is off: device memory does not exist for this build, and every
// call that needs it says so (failed_precondition) instead of failing in some other way.
#include "core/device_copy.hpp"

namespace sluice::core {

namespace {
Status no_cuda() {
  return failed_precondition("built without CUDA: no device memory");
}
}  // namespace

DevicePointer device_pointer(const void* /*p*/) {
  return {};
}

Result<std::uint64_t> device_chunk_checksum(const void* /*device_data*/, std::size_t /*bytes*/) {
  return no_cuda();
}

Result<ChunkSums> device_chunk_sums(const void* /*device_data*/, std::size_t /*bytes*/,
                                    SumKind /*kind*/) {
  return no_cuda();
}

Result<std::unique_ptr<DeviceBuffer>> DeviceBuffer::allocate(int /*device*/,
                                                             std::size_t /*bytes*/) {
  return no_cuda();
}
DeviceBuffer::~DeviceBuffer() = default;

Result<std::unique_ptr<PinnedHost>> PinnedHost::pin(void* /*host*/, std::size_t /*bytes*/) {
  return no_cuda();
}
PinnedHost::~PinnedHost() = default;

struct DeviceCopier::Impl {};

DeviceCopier::DeviceCopier(DeviceCopyOptions options) : options_(options) {}
DeviceCopier::~DeviceCopier() = default;

Result<std::unique_ptr<DeviceCopier>> DeviceCopier::create(DeviceCopyOptions /*options*/) {
  return no_cuda();
}

// A DeviceCopier cannot be made in this build; the members below exist for the linker only.
Status DeviceCopier::check(const DeviceLayout& /*layout*/) const {
  return no_cuda();
}
Status DeviceCopier::to_host(const DeviceLayout& /*layout*/, std::uint8_t* /*host*/,
                             const std::function<void(std::uint64_t)>& /*on_chunk*/) {
  return no_cuda();
}
Status DeviceCopier::enqueue_to_device(const DeviceLayout& /*layout*/, const std::uint8_t* /*host*/,
                                       std::uint64_t /*offset*/, std::uint64_t /*bytes*/) {
  return no_cuda();
}
Status DeviceCopier::synchronize() {
  return no_cuda();
}
Status DeviceCopier::to_device(const DeviceLayout& /*layout*/, const std::uint8_t* /*host*/) {
  return no_cuda();
}

}  // namespace sluice::core
