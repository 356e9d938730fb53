#include "model/device.hpp"

#include <atomic>
#include <string>

#include "core/cuda_device.hpp"
#include "core/log.hpp"
#include "model/cuda_gemm.hpp"

namespace sluice::model {

namespace {
// Read on every product, so a relaxed atomic: the choice is made at start-up and needs no
// ordering with anything else.
std::atomic<Device> g_device{Device::kCpu};
}  // namespace

core::Result<Device> parse_device(std::string_view name) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  return core::invalid_argument("device must be cpu or cuda, not '" + std::string(name) + "'");
}

std::string_view device_name(Device device) {
  return device == Device::kCuda ? "cuda" : "cpu";
}

core::Status use_device(Device device) {
  if (device == Device::kCuda) {
    if (!detail::cuda_built()) {
      return core::failed_precondition("built without CUDA (SLUICE_ENABLE_CUDA=OFF)");
    }
    core::CudaDevices devs = core::cuda_devices();
    if (devs.count == 0) return core::failed_precondition("no CUDA device (" + devs.why_none + ")");
    // Starts cuBLAS on this thread now, so a broken driver or library is an error here rather
    // than an abort in the first product.
    core::Status ready = detail::prepare_cuda_sgemm();
    if (!ready.is_ok()) {
      return core::failed_precondition("cuBLAS does not start: " + ready.message());
    }
  }
  if (g_device.exchange(device, std::memory_order_relaxed) != device) {
    core::log::info("model: matrix products now run on {}", device_name(device));
  }
  return {};
}

Device current_device() {
  return g_device.load(std::memory_order_relaxed);
}

}  // namespace sluice::model
