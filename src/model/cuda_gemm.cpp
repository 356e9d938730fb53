// Compiled when SLUICE_ENABLE_CUDA is on (cuda_gemm_none.cpp otherwise).
#include "model/cuda_gemm.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "core/log.hpp"

namespace sluice::model {

namespace {
core::Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  std::string msg = std::string(what) + ": " + cudaGetErrorString(e);
  cudaGetLastError();  // clear a sticky error so later calls report their own
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
    return core::failed_precondition(msg);
  }
  return core::internal_error(msg);
}

core::Status cublas_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return {};
  return core::internal_error(std::string(what) + ": cublas status " +
                              std::to_string(static_cast<int>(s)));
}

core::Status have_device() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    std::string msg = std::string("cuda: ") + cudaGetErrorString(e);
    cudaGetLastError();
    return core::failed_precondition(msg);
  }
  if (n == 0) return core::failed_precondition("cuda: no device");
  return cuda_status(cudaSetDevice(0), "cudaSetDevice");
}
}  // namespace

core::Result<std::unique_ptr<DeviceBuffer>> DeviceBuffer::create(std::size_t size) {
  SLUICE_TRY(have_device());
  void* p = nullptr;
  SLUICE_TRY(
      cuda_status(cudaMalloc(&p, size == 0 ? sizeof(float) : size * sizeof(float)), "cudaMalloc"));
  return std::unique_ptr<DeviceBuffer>(new DeviceBuffer(static_cast<float*>(p), size));
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ == nullptr) return;
  cudaError_t e = cudaFree(data_);
  if (e != cudaSuccess)
    core::log::warn("device buffer: cudaFree failed: {}", cudaGetErrorString(e));
}

core::Status DeviceBuffer::upload(std::span<const float> host) {
  if (host.size() != size_) {
    return core::invalid_argument("device buffer upload: " + std::to_string(host.size()) +
                                  " floats into a buffer of " + std::to_string(size_));
  }
  return cuda_status(cudaMemcpy(data_, host.data(), size_ * sizeof(float), cudaMemcpyHostToDevice),
                     "cudaMemcpy H2D");
}

core::Status DeviceBuffer::download(std::span<float> host) const {
  if (host.size() != size_) {
    return core::invalid_argument("device buffer download: " + std::to_string(size_) +
                                  " floats into a host span of " + std::to_string(host.size()));
  }
  return cuda_status(cudaMemcpy(host.data(), data_, size_ * sizeof(float), cudaMemcpyDeviceToHost),
                     "cudaMemcpy D2H");
}

core::Result<std::unique_ptr<CublasGemm>> CublasGemm::create() {
  SLUICE_TRY(have_device());
  cublasHandle_t h = nullptr;
  SLUICE_TRY(cublas_status(cublasCreate(&h), "cublasCreate"));
  return std::unique_ptr<CublasGemm>(new CublasGemm(h));
}

CublasGemm::~CublasGemm() {
  if (handle_ == nullptr) return;
  cublasStatus_t s = cublasDestroy(static_cast<cublasHandle_t>(handle_));
  if (s != CUBLAS_STATUS_SUCCESS) {
    core::log::warn("cublas: cublasDestroy failed with status {}", static_cast<int>(s));
  }
}

core::Status CublasGemm::sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                               const DeviceBuffer& a, int lda, const DeviceBuffer& b, int ldb,
                               float beta, DeviceBuffer& c, int ldc) {
  SLUICE_TRY(detail::check_operand("A", trans_a ? k : m, trans_a ? m : k, lda, a.size()));
  SLUICE_TRY(detail::check_operand("B", trans_b ? n : k, trans_b ? k : n, ldb, b.size()));
  SLUICE_TRY(detail::check_operand("C", m, n, ldc, c.size()));
  if (m == 0 || n == 0) return {};
  // cuBLAS is column-major. A row-major X is the column-major X^T, so row-major C = op(A) op(B)
  // is column-major C^T = op(B)^T op(A)^T: swap the operands and m with n, keep the flags.
  SLUICE_TRY(cublas_status(
      cublasSgemm(static_cast<cublasHandle_t>(handle_), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                  trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b.device_data(), ldb,
                  a.device_data(), lda, &beta, c.device_data(), ldc),
      "cublasSgemm"));
  return cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

}  // namespace sluice::model
