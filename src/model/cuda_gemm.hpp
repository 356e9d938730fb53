// A small cuBLAS-backed sgemm on device buffers, to check the GPU path against OpenBLAS and as
// the seed of a GPU backend. Built with or without CUDA (cuda_gemm.cpp or cuda_gemm_none.cpp);
// without CUDA, or without a device, the factories fail with failed_precondition and say why.
// No CUDA types appear here.
//
// Thread safety: a CublasGemm (one cuBLAS handle) is used by one thread at a time; DeviceBuffer
// objects are independent.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "core/status.hpp"

namespace sluice::model {

// `size` floats of device memory on device 0, freed on destruction.
class DeviceBuffer {
 public:
  static core::Result<std::unique_ptr<DeviceBuffer>> create(std::size_t size);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  std::size_t size() const { return size_; }
  float* device_data() { return data_; }
  const float* device_data() const { return data_; }
  // Copies host -> device (host.size() must equal size()).
  core::Status upload(std::span<const float> host);
  // Copies device -> host (host.size() must equal size()).
  core::Status download(std::span<float> host) const;

 private:
  DeviceBuffer(float* data, std::size_t size) : data_(data), size_(size) {}
  float* data_ = nullptr;
  std::size_t size_ = 0;
};

class CublasGemm {
 public:
  static core::Result<std::unique_ptr<CublasGemm>> create();
  ~CublasGemm();
  CublasGemm(const CublasGemm&) = delete;
  CublasGemm& operator=(const CublasGemm&) = delete;

  // C[m, n] = alpha * op(A) @ op(B) + beta * C, ROW-major like kernels::sgemm (cblas RowMajor),
  // and synchronous: the result is in `c` when it returns. Leading dimensions and buffer sizes
  // are checked (invalid_argument).
  core::Status sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                     const DeviceBuffer& a, int lda, const DeviceBuffer& b, int ldb, float beta,
                     DeviceBuffer& c, int ldc);

 private:
  explicit CublasGemm(void* handle) : handle_(handle) {}
  void* handle_ = nullptr;  // cublasHandle_t
};

namespace detail {
// Checks a row-major operand of `rows` x `cols` with leading dimension `ld` fits in `size`.
core::Status check_operand(const char* name, int rows, int cols, int ld, std::size_t size);
}  // namespace detail

}  // namespace sluice::model
