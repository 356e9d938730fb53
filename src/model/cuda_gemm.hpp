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
  // A row-major `rows` x `cols` matrix with leading dimension `ld`, laid out alike on both sides
  // from element 0: copies only its elements, never the gaps between rows (ld > cols), so a
  // download into a strided view leaves the host's other columns alone. Both `host` and the
  // buffer must hold (rows - 1) x ld + cols floats (invalid_argument otherwise).
  core::Status upload_matrix(std::span<const float> host, int rows, int cols, int ld);
  core::Status download_matrix(std::span<float> host, int rows, int cols, int ld) const;

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
// Floats spanned by a row-major `rows` x `cols` operand with leading dimension `ld`:
// (rows - 1) x ld + cols, 0 when rows is 0 (the last row need not be padded to ld).
std::size_t operand_floats(int rows, int cols, int ld);
// Checks a row-major operand of `rows` x `cols` with leading dimension `ld` fits in `size`.
core::Status check_operand(const char* name, int rows, int cols, int ld, std::size_t size);

// The CUDA side of model::use_device and kernels::sgemm (device.hpp); both builds define them.
// Whether this build has CUDA.
bool cuda_built();
// Starts the calling thread's cuBLAS handle for host_sgemm_on_cuda (failed_precondition without
// CUDA or a device).
core::Status prepare_cuda_sgemm();
// kernels::sgemm's contract on host pointers, computed on device 0 through the calling thread's
// cuBLAS handle and device scratch (grown to the largest product seen, never shrunk): uploads A
// and B (and C when beta != 0), runs, downloads C, touching only the m x n elements of C. Aborts
// the process with a logged message when CUDA or cuBLAS fails (or in a build without CUDA).
void host_sgemm_on_cuda(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                        const float* a, int lda, const float* b, int ldb, float beta, float* c,
                        int ldc);
}  // namespace detail

}  // namespace sluice::model
