// Compiled when SLUICE_ENABLE_CUDA is off (cuda_gemm.cpp otherwise).
#include "model/cuda_gemm.hpp"

#include <cstdlib>

#include "core/log.hpp"

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

core::Status DeviceBuffer::upload_matrix(std::span<const float> /*host*/, int, int, int) {
  return core::failed_precondition("built without CUDA");
}
core::Status DeviceBuffer::download_matrix(std::span<float> /*host*/, int, int, int) const {
  return core::failed_precondition("built without CUDA");
}

namespace detail {

bool cuda_built() {
  return false;
}

core::Status prepare_cuda_sgemm() {
  return core::failed_precondition("built without CUDA");
}

// Unreachable: use_device(kCuda) refuses in this build, so kernels::sgemm never comes here.
void host_sgemm_on_cuda(bool, bool, int, int, int, float, const float*, int, const float*, int,
                        float, float*, int) {
  core::log::error("model: sgemm on cuda in a build without CUDA");
  std::abort();
}

}  // namespace detail

}  // namespace sluice::model
