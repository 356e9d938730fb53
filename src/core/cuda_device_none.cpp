// Compiled when SLUICE_ENABLE_CUDA is off.
#include "core/cuda_device.hpp"

namespace sluice::core {

CudaDevices cuda_devices() {
  return {0, "built without CUDA"};
}

Status cuda_roundtrip_check(std::size_t /*bytes*/) {
  return failed_precondition("built without CUDA");
}

Status cuda_wait_legacy_stream(int /*device*/) {
  return failed_precondition("built without CUDA");
}

}  // namespace sluice::core
