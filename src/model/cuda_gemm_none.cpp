// Compiled when SLUICE_ENABLE_CUDA is off (cuda_gemm.cpp otherwise).
#include "model/cuda_gemm.hpp"

namespace sluice::model {

core::Result<std::unique_ptr<DeviceBuffer>> DeviceBuffer::create(std::size_t /*size*/) {
  return core::failed_precondition("built without CUDA");
}
DeviceBuffer::~DeviceBuffer() = default;
core::Status DeviceBuffer::upload(std::span<const float> /*host*/) {
  return core::failed_precondition("built without CUDA");
}
core::Status DeviceBuffer::download(std::span<float> /*host*/) const {
  return core::failed_precondition("built without CUDA");
}

core::Result<std::unique_ptr<CublasGemm>> CublasGemm::create() {
  return core::failed_precondition("built without CUDA");
}
CublasGemm::~CublasGemm() = default;
core::Status CublasGemm::sgemm(bool, bool, int, int, int, float, const DeviceBuffer&, int,
                               const DeviceBuffer&, int, float, DeviceBuffer&, int) {
  return core::failed_precondition("built without CUDA");
}

}  // namespace sluice::model
